use clap::Parser;

fn main() {
    let cli = fleetagent::cli::Cli::parse();
    let _ = cli;
}
