//! Local token estimates for prompts: the encoding chosen from the model name, and counts of
//! text, messages and tool schemas that must not under-count what the provider bills (the
//! project's bar: never more than 2 % below its `usage.prompt_tokens`). No I/O, no prompt
//! building; the BPE tables load once per process, on the first count.

use tiktoken_rs::CoreBPE;

use crate::llm::{ChatMessage, ChatRequest, ToolSpec};

/// Framing of every message (`<|start|>{role}<|message|>…<|end|>` minus the role itself), per
/// the OpenAI cookbook's rule for gpt-3.5-turbo-0125, gpt-4 and gpt-4o.
pub const TOKENS_PER_MESSAGE: u64 = 3;
/// The reply primer `<|start|>assistant<|message|>`, once per request (cookbook).
pub const REPLY_PRIMER_TOKENS: u64 = 3;
/// Per tool call on an assistant message, on top of the tokens of its id, name and arguments.
/// The cookbook gives no rule; tiktoken-rs adds 1. We reserve a message frame (3) plus the
/// `type`/recipient marker (1), because the id and the frame are what a provider may render.
pub const TOKENS_PER_TOOL_CALL: u64 = 4;
/// Per tool schema, on top of the tokens of its JSON serialization: the cookbook's largest
/// per-function constant (`func_init` = 10 for gpt-3.5/gpt-4; 7 for gpt-4o).
pub const TOKENS_PER_TOOL: u64 = 10;
/// Once when any tools are sent: the cookbook's `func_end` (the tools section frame).
pub const TOOLS_FRAME_TOKENS: u64 = 12;

/// The BPE encodings we count with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Encoding {
    /// gpt-4o and everything newer (gpt-4.1, gpt-4.5, gpt-5, o-series), and unknown models.
    O200kBase,
    /// gpt-4, gpt-4-turbo, gpt-3.5-turbo.
    Cl100kBase,
}

impl Encoding {
    /// The encoding a model name implies. A leading `ft:` (fine-tune) and a provider prefix
    /// (`openai/gpt-4o` on OpenRouter) are ignored. Unknown models, including local ones behind
    /// vLLM or Ollama whose own tokenizer we cannot load, get `o200k_base` as the cookbook does.
    pub fn for_model(model: &str) -> Encoding {
        Encoding::of_openai_model(model).unwrap_or(Encoding::O200kBase)
    }

    /// The encoding of one of OpenAI's own models (whose tokenizer ours is); `None` for any
    /// other model, which we count with `o200k_base` as a stand-in.
    pub fn of_openai_model(model: &str) -> Option<Encoding> {
        let name = model.trim();
        let name = name.strip_prefix("ft:").unwrap_or(name);
        let name = name.rsplit('/').next().unwrap_or(name).to_ascii_lowercase();
        const O200K: [&str; 9] = [
            "gpt-4o",
            "chatgpt-4o",
            "gpt-4.1",
            "gpt-4.5",
            "o1",
            "o3",
            "o4",
            "gpt-5",
            "codex-mini",
        ];
        if O200K.iter().any(|p| name.starts_with(p)) {
            return Some(Encoding::O200kBase);
        }
        let cl100k = name == "gpt-4"
            || name.starts_with("gpt-4-")
            || name.starts_with("gpt-4:")
            || name.starts_with("gpt-3.5")
            || name.starts_with("gpt-35");
        cl100k.then_some(Encoding::Cl100kBase)
    }

    /// Parse an explicit setting (`llm.encoding`).
    pub fn from_name(name: &str) -> Option<Encoding> {
        match name.trim() {
            "o200k_base" => Some(Encoding::O200kBase),
            "cl100k_base" => Some(Encoding::Cl100kBase),
            _ => None,
        }
    }

    /// The override when given, else the model's encoding.
    pub fn resolve(model: &str, override_name: Option<&str>) -> Result<Encoding, String> {
        match override_name {
            Some(name) => Encoding::from_name(name).ok_or_else(|| {
                format!("unknown encoding {name:?}: use \"o200k_base\" or \"cl100k_base\"")
            }),
            None => Ok(Encoding::for_model(model)),
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Encoding::O200kBase => "o200k_base",
            Encoding::Cl100kBase => "cl100k_base",
        }
    }
}

/// Counts tokens with one encoding. Constructing it is free; the BPE tables (a few MB, tens of
/// milliseconds to build) load on the first count and are shared by the whole process.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Tokenizer {
    encoding: Encoding,
}

impl Tokenizer {
    pub fn new(encoding: Encoding) -> Tokenizer {
        Tokenizer { encoding }
    }

    /// See [`Encoding::resolve`].
    pub fn for_model(model: &str, override_name: Option<&str>) -> Result<Tokenizer, String> {
        Encoding::resolve(model, override_name).map(Tokenizer::new)
    }

    /// The tokenizer of `[llm]` (`model`, or the `encoding` override); a bad override names
    /// the key.
    pub fn for_config(config: &crate::config::Config) -> anyhow::Result<Tokenizer> {
        Tokenizer::for_model(&config.llm.model, config.llm.encoding.as_deref())
            .map_err(|e| anyhow::anyhow!("llm.encoding: {e}"))
    }

    pub fn encoding(&self) -> Encoding {
        self.encoding
    }

    fn bpe(&self) -> &'static CoreBPE {
        static O200K: std::sync::OnceLock<&'static CoreBPE> = std::sync::OnceLock::new();
        static CL100K: std::sync::OnceLock<&'static CoreBPE> = std::sync::OnceLock::new();
        let (cell, load): (_, fn() -> &'static CoreBPE) = match self.encoding {
            Encoding::O200kBase => (&O200K, tiktoken_rs::o200k_base_singleton),
            Encoding::Cl100kBase => (&CL100K, tiktoken_rs::cl100k_base_singleton),
        };
        cell.get_or_init(|| {
            crate::faults::stats::tokenizer_loaded();
            load()
        })
    }

    /// Tokens of plain text. Special-token markup such as `<|endoftext|>` in tool output counts
    /// as the ordinary text it is (as the provider bills it), not as one special token.
    pub fn count_text(&self, text: &str) -> u64 {
        if text.is_empty() {
            return 0;
        }
        self.bpe().count_ordinary(text) as u64
    }

    /// One message: the cookbook rule (frame + role + content) plus the tool-call id of a tool
    /// message and, per tool call, its id, name and arguments plus [`TOKENS_PER_TOOL_CALL`].
    /// This is the number stored with each message row.
    pub fn count_message(&self, m: &ChatMessage) -> u64 {
        let mut n =
            TOKENS_PER_MESSAGE + self.count_text(m.role.as_str()) + self.count_text(&m.content);
        if let Some(id) = &m.tool_call_id {
            n += self.count_text(id);
        }
        for call in &m.tool_calls {
            n += TOKENS_PER_TOOL_CALL
                + self.count_text(&call.id)
                + self.count_text(&call.name)
                + self.count_text(&call.arguments);
        }
        n
    }

    /// Messages plus the reply primer, as one request would carry them (tools not included).
    pub fn count_messages(&self, messages: &[ChatMessage]) -> u64 {
        messages.iter().map(|m| self.count_message(m)).sum::<u64>() + REPLY_PRIMER_TOKENS
    }

    /// Tool schemas. OpenAI renders tools into the prompt in an undocumented form; the
    /// cookbook's `num_tokens_for_tools` is a formula fitted on one flat example that is off by
    /// tens of tokens either way on richer schemas. To never under-count we take the tokens of
    /// each function's JSON serialization (which holds every name, description, type, enum value
    /// and constraint the rendering can contain, plus JSON punctuation) plus
    /// [`TOKENS_PER_TOOL`] each, and [`TOOLS_FRAME_TOKENS`] once. Zero without tools.
    pub fn count_tools(&self, tools: &[ToolSpec]) -> u64 {
        if tools.is_empty() {
            return 0;
        }
        let per_tool: u64 = tools
            .iter()
            .map(|t| {
                let json = serde_json::json!({
                    "name": t.name,
                    "description": t.description,
                    "parameters": t.parameters,
                });
                TOKENS_PER_TOOL + self.count_text(&json.to_string())
            })
            .sum();
        per_tool + TOOLS_FRAME_TOKENS
    }

    /// The whole prompt of one request: messages, reply primer and tools.
    pub fn count_request(&self, req: &ChatRequest) -> u64 {
        self.count_messages(&req.messages) + self.count_tools(&req.tools)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::llm::{Role, ToolCall};

    #[test]
    fn encodings_from_model_names() {
        let o200k = [
            "gpt-4o",
            "gpt-4o-mini-2024-07-18",
            "chatgpt-4o-latest",
            "gpt-4.1-mini",
            "gpt-4.5-preview",
            "o1-mini",
            "o3",
            "o4-mini",
            "gpt-5",
            "gpt-5.4-mini",
            "codex-mini-latest",
            "ft:gpt-4o-mini:acme::abc123",
            "openai/gpt-4.1",
            "qwen2.5:14b",
            "",
        ];
        for m in o200k {
            assert_eq!(Encoding::for_model(m), Encoding::O200kBase, "{m}");
        }
        let cl100k = [
            "gpt-4",
            "gpt-4-0613",
            "gpt-4-turbo",
            "gpt-3.5-turbo",
            "gpt-35-turbo",
            "ft:gpt-3.5-turbo-0125:acme::x",
            "ft:gpt-4:acme::x",
            "openai/gpt-4-turbo",
        ];
        for m in cl100k {
            assert_eq!(Encoding::for_model(m), Encoding::Cl100kBase, "{m}");
        }
    }

    #[test]
    fn override_wins_and_unknown_names_are_refused() {
        let t = Tokenizer::for_model("gpt-4o", Some("cl100k_base")).unwrap();
        assert_eq!(t.encoding(), Encoding::Cl100kBase);
        assert_eq!(
            Tokenizer::for_model("gpt-4", None)
                .unwrap()
                .encoding()
                .name(),
            "cl100k_base"
        );
        assert!(Tokenizer::for_model("gpt-4o", Some("p50k_base")).is_err());
    }

    #[test]
    fn special_token_text_counts_as_text() {
        let t = Tokenizer::new(Encoding::O200kBase);
        // As a special token it would be 1; as text it is several.
        assert!(t.count_text("<|endoftext|>") > 3);
        assert_eq!(t.count_text(""), 0);
    }

    #[test]
    fn message_rule() {
        let t = Tokenizer::new(Encoding::O200kBase);
        let user = ChatMessage {
            role: Role::User,
            content: "hello world".into(),
            tool_calls: vec![],
            tool_call_id: None,
        };
        // 3 frame + "user" (1) + "hello world" (2), the cookbook's arithmetic.
        assert_eq!(t.count_message(&user), 6);
        assert_eq!(t.count_messages(&[user.clone(), user.clone()]), 15);

        let call = ToolCall {
            id: "call_a1".into(),
            name: "list_instances".into(),
            arguments: "{}".into(),
        };
        let assistant = ChatMessage {
            role: Role::Assistant,
            content: String::new(),
            tool_calls: vec![call.clone(), call.clone()],
            tool_call_id: None,
        };
        let one_call = TOKENS_PER_TOOL_CALL
            + t.count_text(&call.id)
            + t.count_text(&call.name)
            + t.count_text(&call.arguments);
        assert_eq!(
            t.count_message(&assistant),
            TOKENS_PER_MESSAGE + t.count_text("assistant") + 2 * one_call
        );
        let tool = ChatMessage {
            role: Role::Tool,
            content: "[]".into(),
            tool_calls: vec![],
            tool_call_id: Some("call_a1".into()),
        };
        assert_eq!(
            t.count_message(&tool),
            TOKENS_PER_MESSAGE
                + t.count_text("tool")
                + t.count_text("[]")
                + t.count_text("call_a1")
        );
    }

    #[test]
    fn tools_cost_their_json_plus_overhead() {
        let t = Tokenizer::new(Encoding::O200kBase);
        assert_eq!(t.count_tools(&[]), 0);
        let spec = ToolSpec {
            name: "stop_instance".into(),
            description: "Stop one instance.".into(),
            parameters: serde_json::json!({
                "type": "object",
                "properties": {"instance_id": {"type": "integer"}, "reason": {"type": "string"}},
                "required": ["instance_id", "reason"],
            }),
        };
        let one = t.count_tools(std::slice::from_ref(&spec));
        let two = t.count_tools(&[spec.clone(), spec]);
        assert_eq!(two - one, one - TOOLS_FRAME_TOKENS);
        assert!(one > TOKENS_PER_TOOL + TOOLS_FRAME_TOKENS + 20, "{one}");
    }
}
