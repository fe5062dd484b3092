//! Everything the model reads, pure: the system prompt and the pinned state block, the
//! observation of a pass, the folded event lines, how its answers are stored so they can be
//! sent again, the notes the rules leave, and the context ladder that makes the whole prompt
//! fit its budget and the validator that checks it before every request (the incident's
//! 38k-token prompt: `context`). Nothing here tokenizes, queries or sends: the agent loop
//! (`agent`) counts, reads the rows and calls the model.

pub mod action_needed;
pub mod actions;
pub mod answer;
pub mod calibration;
pub mod context;
pub mod curio;
pub mod economics;
pub mod events;
pub mod notes;
pub mod observation;
pub mod state;

use crate::config::Config;

/// The system prompt, a file in the repository.
pub const SYSTEM_PROMPT: &str = include_str!("../../prompts/system.md");

/// Share of `context_budget_tokens` kept free for the gap between our estimate and the
/// provider's tokenizer (servers such as vLLM or Ollama count with their own).
pub const BUDGET_MARGIN_PERCENT: u64 = 5;

/// The budget the prompt is assembled and validated to: the configured one less the safety
/// margin and less `llm.max_output_tokens`, since the prompt and the answer share the
/// server's context (a server that cannot fit both refuses the request or cuts the answer).
/// 0 when the output cap takes it all: the assembler then refuses with the sizes.
pub fn effective_budget(config: &Config) -> u64 {
    let b = config.llm.context_budget_tokens;
    (b - b * BUDGET_MARGIN_PERCENT / 100).saturating_sub(config.llm.max_output_tokens)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_answer_is_counted_inside_the_budget() {
        let mut c = Config::default();
        c.llm.context_budget_tokens = 30_000;
        c.llm.max_output_tokens = 1024;
        assert_eq!(effective_budget(&c), 30_000 - 1_500 - 1024);
        c.llm.context_budget_tokens = 2_000;
        c.llm.max_output_tokens = 4_096;
        assert_eq!(effective_budget(&c), 0);
    }

    /// Every word the state block and the observation's first line use for an instance or
    /// for demand is explained in the system prompt (the prompt walkthrough: "running",
    /// `active=false` and "the floor" were not, and a small model read `Target` as a quota).
    #[test]
    fn the_system_prompt_explains_the_words_the_observation_uses() {
        use crate::fleet::state::State;
        let flat = SYSTEM_PROMPT
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" ");
        let said = |w: &str| flat.contains(w);
        let states = SYSTEM_PROMPT
            .split("\n\n")
            .find(|p| p.starts_with("Instance states:"))
            .expect("an `Instance states:` paragraph");
        for s in State::ALL.iter().filter(|s| **s != State::Gone) {
            assert!(states.contains(s.as_str()), "{s:?}");
        }
        for w in [
            "`running` = booted, registered or proving",
            "`Demand: active=`",
            "the floor is",
            "a ceiling, not a quota",
        ] {
            assert!(said(w), "{w}");
        }
    }
}
