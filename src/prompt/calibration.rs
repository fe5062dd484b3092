//! The prompt-token estimate calibrated per model, pure: our count (tiktoken, o200k for
//! unknown models) under-counts tokenizers that split digits one by one (Qwen, SmolLM: 10-19 %
//! above o200k on our prompts). After every call the provider's `usage.prompt_tokens` over our
//! raw estimate is one sample; the model's ratio is the recent maximum of those samples plus
//! [`MARGIN`], never below 1.0, and the prompt budget is divided by it before the assembler
//! and the validator check the raw estimate against it. A request the server refused as too
//! long for its context (no usage then) also yields a sample: see [`overflow_sample`].

use crate::llm::LlmError;

/// Kept above the largest recent sample.
pub const MARGIN: f64 = 0.02;
/// How many lower samples it takes for an old peak to fade: each one removes 1/WINDOW of the
/// peak's excess over it (after 50 lower samples about a third of it is left), while a sample
/// above the peak raises it at once. A decayed maximum stands in for "the maximum over the
/// last 50 calls" so that one stored number per model is enough.
pub const WINDOW: f64 = 50.0;
/// No sample counts for more than this: a provider whose figure is this far from ours
/// reports something else than the prompt (a cumulative count, a cache), and a ratio this high
/// would shrink every prompt to nothing. Real tokenizers stay well below it. A count above it
/// is no sample at all ([`sample`]).
pub use crate::store::calibration::MAX_RATIO;
/// A refusal for an over-long prompt tells only that the server counted more than the budget:
/// the sample inferred from it never exceeds this (a budget set far above the server's
/// context must not shrink every later prompt to a sliver; that is a setting to fix).
pub const MAX_INFERRED_RATIO: f64 = 1.5;
/// A refusal for an over-long prompt raises the ratio by at least this share (before the
/// margin), so that a prompt filling the budget gets under the server's context in a few
/// passes rather than one margin at a time.
pub const OVERFLOW_STEP: f64 = 0.05;

/// One call's sample: what the provider counted over what we estimated for the same request.
/// `None` when either is zero (nothing to learn), or when the count is over [`MAX_RATIO`]
/// times the estimate: not a count of this prompt, and kept as a sample it held every later
/// prompt to a third of its budget ([`impossible`] says so).
pub fn sample(reported: u64, estimate: u64) -> Option<f64> {
    (reported > 0 && estimate > 0 && !impossible(reported, estimate))
        .then(|| reported as f64 / estimate as f64)
}

/// A provider's prompt count over [`MAX_RATIO`] times our estimate of the same request.
pub fn impossible(reported: u64, estimate: u64) -> bool {
    estimate > 0 && reported as f64 > estimate as f64 * MAX_RATIO
}

/// The model's ratio after one more sample: the decayed maximum of the samples, plus
/// [`MARGIN`], at least 1.0. `prev` is the stored ratio (the
/// margin is taken off it to recover the peak); `None` before the model's first sample.
pub fn fold(prev: Option<f64>, sample: f64) -> f64 {
    let prev = prev.filter(|r| r.is_finite() && *r >= 1.0);
    if !sample.is_finite() || sample <= 0.0 {
        return prev.unwrap_or(1.0);
    }
    let sample = sample.min(MAX_RATIO);
    let peak = match prev {
        None => sample,
        Some(r) => {
            let peak = r / (1.0 + MARGIN);
            if sample >= peak {
                sample
            } else {
                peak - (peak - sample) / WINDOW
            }
        }
    };
    (peak * (1.0 + MARGIN)).max(1.0)
}

/// The budget the raw estimate is held to: `budget` (in the provider's tokens) divided by the
/// model's ratio. A missing or nonsensical ratio leaves it as it is.
pub fn calibrated_budget(budget: u64, ratio: Option<f64>) -> u64 {
    match ratio.filter(|r| r.is_finite() && *r > 1.0) {
        Some(r) => (budget as f64 / r).floor() as u64,
        None => budget,
    }
}

/// Whether a server's refusal says the prompt is too long for its context. The shapes seen:
/// OpenAI and vLLM ("This model's maximum context length is 8192 tokens. However, ..."),
/// llama.cpp's server ("the request exceeds the available context size, try increasing
/// it"), llama-cpp-python ("Requested tokens (3317) exceed context window of 3072"), vLLM's
/// newer "... is longer than the maximum model length of ...".
pub fn is_context_overflow(message: &str) -> bool {
    let m = message.to_ascii_lowercase();
    m.contains("context_length_exceeded")
        || m.contains("maximum context length")
        || m.contains("maximum model length")
        || (m.contains("context") && (m.contains("exceed") || m.contains("too long")))
}

/// A sample from a request refused as too long for the server's context: the server counted
/// more than the whole budget (the budget is meant to fit the server's context), so the ratio
/// is at least `budget / estimate`, where `budget` is the one before calibration and
/// `estimate` the refused request's raw estimate. As that is a bound, not a count, it is
/// capped at [`MAX_INFERRED_RATIO`], and never below the model's ratio raised by
/// [`OVERFLOW_STEP`], so that every such refusal shrinks the next prompt. `None` for any other
/// failure.
pub fn overflow_sample(
    error: &LlmError,
    budget: u64,
    estimate: u64,
    ratio: Option<f64>,
) -> Option<f64> {
    let LlmError::Rejected { message, .. } = error else {
        return None;
    };
    if !is_context_overflow(message) || estimate == 0 {
        return None;
    }
    let bound = budget as f64 / estimate as f64;
    let at_least = ratio.unwrap_or(1.0).max(1.0) * (1.0 + OVERFLOW_STEP);
    Some(bound.max(at_least).min(MAX_INFERRED_RATIO))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sample_is_reported_over_estimated() {
        assert_eq!(
            sample(3131, 2683).map(|s| (s * 1000.0).round()),
            Some(1167.0)
        );
        assert_eq!(sample(0, 2683), None);
        assert_eq!(sample(100, 0), None);
        // A count no tokenizer makes (a server's 10^12) is no sample: kept, it held every
        // later prompt to a third of its budget.
        assert_eq!(sample(1_000_000_000_000, 7_000), None);
        assert!(impossible(1_000_000_000_000, 7_000));
        assert_eq!(sample(3000, 1000), Some(3.0));
        assert!(!impossible(3000, 1000) && impossible(3001, 1000));
    }

    fn near(a: f64, b: f64) -> bool {
        (a - b).abs() < 1e-9
    }

    #[test]
    fn the_first_sample_sets_the_ratio_with_its_margin_never_below_one() {
        assert!(near(fold(None, 1.2), 1.224));
        assert_eq!(
            fold(None, 0.8),
            1.0,
            "an over-counting estimate needs no ratio"
        );
        assert!(near(fold(None, 1.0), 1.02));
    }

    #[test]
    fn a_higher_sample_raises_the_ratio_at_once() {
        assert!(near(fold(Some(1.1), 1.3), 1.326));
    }

    #[test]
    fn a_lower_sample_lets_the_peak_fade_slowly() {
        let mut r = fold(None, 1.2);
        r = fold(Some(r), 1.1);
        // One lower sample removes a fiftieth of the excess.
        assert!(near(r, (1.2 - 0.1 / 50.0) * 1.02), "{r}");
        for _ in 0..49 {
            r = fold(Some(r), 1.1);
        }
        // After 50 lower samples about a third of the excess is left; still above the samples.
        let peak = r / 1.02;
        assert!(peak > 1.13 && peak < 1.14, "{peak}");
        for _ in 0..2000 {
            r = fold(Some(r), 1.1);
        }
        assert!((1.1 * 1.02 - 1e-9..1.1 * 1.02 + 1e-6).contains(&r), "{r}");
        // Never below 1.0, whatever the samples.
        let mut r = 1.5;
        for _ in 0..1000 {
            r = fold(Some(r), 0.5);
        }
        assert_eq!(r, 1.0);
    }

    #[test]
    fn nonsense_samples_change_nothing_or_are_capped() {
        assert_eq!(fold(Some(1.2), f64::NAN), 1.2);
        assert_eq!(fold(Some(1.2), 0.0), 1.2);
        assert_eq!(fold(None, f64::INFINITY), 1.0);
        assert!(near(fold(None, 40.0), MAX_RATIO * 1.02));
        // A stored ratio that is not one (below 1.0, NaN) counts as none.
        assert!(near(fold(Some(f64::NAN), 1.2), 1.224));
        assert!(near(fold(Some(0.5), 1.2), 1.224));
    }

    #[test]
    fn the_budget_is_divided_by_the_ratio() {
        assert_eq!(calibrated_budget(2707, None), 2707);
        assert_eq!(calibrated_budget(2707, Some(1.0)), 2707);
        assert_eq!(calibrated_budget(2707, Some(0.9)), 2707);
        assert_eq!(calibrated_budget(2707, Some(f64::NAN)), 2707);
        assert_eq!(calibrated_budget(2707, Some(1.19)), 2274);
        // What the server counts of a prompt that fills the calibrated budget stays within it.
        let ratio = fold(None, 3131.0 / 2683.0);
        let est = calibrated_budget(2707, Some(ratio));
        assert!((est as f64 * 3131.0 / 2683.0) <= 2707.0);
    }

    #[test]
    fn context_overflow_refusals_are_recognised() {
        for m in [
            "This model's maximum context length is 8192 tokens. However, your messages resulted in 9000 tokens.",
            "the request exceeds the available context size, try increasing it",
            "Requested tokens (3317) exceed context window of 3072",
            "The decoder prompt (length 5000) is longer than the maximum model length of 4096.",
            "context_length_exceeded",
        ] {
            assert!(is_context_overflow(m), "{m}");
        }
        for m in [
            "Invalid 'messages[2].content': string too long",
            "Failed to parse tool call arguments as JSON",
            "model not found",
        ] {
            assert!(!is_context_overflow(m), "{m}");
        }
    }

    #[test]
    fn an_overflow_refusal_yields_a_bounded_sample() {
        let refused = |m: &str| LlmError::Rejected {
            status: 400,
            message: m.into(),
        };
        let e = refused("the request exceeds the available context size, try increasing it");
        // The first incident request: budget 2707 after the margin, estimate 2683.
        // The budget over the estimate (1.009) is less than a step above 1.0.
        assert_eq!(overflow_sample(&e, 2707, 2683, None), Some(1.05));
        // A prompt well under the budget: the bound is the larger.
        let s = overflow_sample(&e, 2707, 2000, None).unwrap();
        assert!((s - 2707.0 / 2000.0).abs() < 1e-9, "{s}");
        // Never less than a step above the ratio in use, so each refusal shrinks the next
        // prompt: 1.0 to 1.17 in three refusals of prompts that fill the budget.
        let s = overflow_sample(&e, 2707, 2683, Some(1.1)).unwrap();
        assert!((s - 1.155).abs() < 1e-9, "{s}");
        let mut ratio = None;
        for _ in 0..3 {
            let est = calibrated_budget(2707, ratio);
            ratio = Some(fold(ratio, overflow_sample(&e, 2707, est, ratio).unwrap()));
        }
        assert!(ratio.unwrap() > 1.17, "{ratio:?}");
        // A bound, capped.
        assert_eq!(
            overflow_sample(&e, 128_000, 3000, None),
            Some(MAX_INFERRED_RATIO)
        );
        assert_eq!(
            overflow_sample(&refused("model not found"), 2707, 2683, None),
            None
        );
        assert_eq!(overflow_sample(&LlmError::NoKey, 2707, 2683, None), None);
        assert_eq!(overflow_sample(&e, 2707, 0, None), None);
    }
}
