//! A local fake of the OpenAI Responses API for the real Codex CLI.
//!
//! The real `codex` reaches it through a custom model provider
//! (`-c model_provider=fake -c 'model_providers.fake={…,base_url=
//! "http://127.0.0.1:PORT/v1",wire_api="responses",env_key="FAKE_KEY"}'`;
//! codex ignores `OPENAI_BASE_URL`) and `POST`s `/v1/responses`, streamed.
//! Each request takes the next scripted [`Reply`]: an assistant message, a
//! shell command or an `apply_patch` edit the CLI runs with its own tools in
//! the checkout, or the 429 `usage_limit_reached` body the real service sends,
//! from which the CLI prints its own limit message. Every stream ends with
//! `response.completed` carrying [`USAGE_PER_RESPONSE`].
//!
//! Tool calls follow the tools the request offers: the default model of
//! codex 0.169.0 offers one JavaScript `exec` tool whose nested
//! `tools.exec_command` / `tools.apply_patch` run the real tools; models
//! without metadata get plain `exec_command` / `apply_patch` tools.
#![allow(dead_code)]

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use serde_json::{Value, json};
use wiremock::{Mock, MockServer, Request, Respond, ResponseTemplate, matchers::any};

/// Token usage every streamed response reports: (input, cached input, output,
/// reasoning output).
pub const USAGE_PER_RESPONSE: (u64, u64, u64, u64) = (1200, 1000, 30, 4);

/// One scripted answer to one `POST /v1/responses`.
#[derive(Debug, Clone)]
pub enum Reply {
    /// The assistant's final message (ends the turn).
    Message(String),
    /// A shell command run by the CLI's own exec tool, in the turn's cwd.
    Shell(String),
    /// A patch in codex's `*** Begin Patch` format, applied by the CLI's own
    /// `apply_patch` tool.
    Patch(String),
    /// HTTP 429 with the `usage_limit_reached` body the service sends
    /// (`resets_at` epoch seconds).
    UsageLimit { resets_at: i64 },
    /// Any status with a JSON body.
    Status(u16, Value),
}

/// What the server saw and what is left to say.
#[derive(Default, Debug)]
pub struct State {
    /// Replies not yet given, in order.
    pub script: VecDeque<Reply>,
    /// Every request: (method, path, JSON body).
    pub requests: Vec<(String, String, Value)>,
    /// Rate-limit headers on every streamed response (the quota gauges):
    /// `x-codex-primary-used-percent` and the others (see
    /// [`FakeResponses::rate_limits`]).
    pub rate_limits: Vec<(String, String)>,
}

/// The running fake.
pub struct FakeResponses {
    pub server: MockServer,
    pub state: Arc<Mutex<State>>,
}

struct Responder {
    state: Arc<Mutex<State>>,
}

impl Respond for Responder {
    fn respond(&self, req: &Request) -> ResponseTemplate {
        let mut st = self.state.lock().unwrap();
        let body: Value = serde_json::from_slice(&req.body).unwrap_or(Value::Null);
        let n = st.requests.len();
        st.requests.push((
            req.method.to_string(),
            req.url.path().to_string(),
            body.clone(),
        ));
        if req.method.as_str() != "POST" || req.url.path() != "/v1/responses" {
            return ResponseTemplate::new(404).set_body_json(json!({"error": {"message": format!("the fake serves POST /v1/responses only, not {} {}", req.method, req.url.path())}}));
        }
        let Some(reply) = st.script.pop_front() else {
            return ResponseTemplate::new(400).set_body_json(json!({"error": {"type": "invalid_request_error", "message": "the fake Responses API has no scripted reply left"}}));
        };
        let headers = st.rate_limits.clone();
        let with = |t: ResponseTemplate| {
            headers
                .iter()
                .fold(t, |t, (k, v)| t.insert_header(k.as_str(), v.as_str()))
        };
        with(match reply {
            Reply::UsageLimit { resets_at } => {
                let in_secs = (resets_at - chrono::Utc::now().timestamp()).max(0);
                ResponseTemplate::new(429).set_body_json(json!({"error": {"type": "usage_limit_reached", "message": "The usage limit has been reached", "plan_type": "plus", "resets_at": resets_at, "eligible_promo": null, "resets_in_seconds": in_secs}}))
            }
            Reply::Status(code, v) => ResponseTemplate::new(code).set_body_json(v),
            Reply::Message(text) => sse(n, message_item(n, &text)),
            Reply::Shell(cmd) => sse(n, tool_call(n, &body, Tool::Shell(&cmd))),
            Reply::Patch(patch) => sse(n, tool_call(n, &body, Tool::Patch(&patch))),
        })
    }
}

enum Tool<'a> {
    Shell(&'a str),
    Patch(&'a str),
}

fn message_item(n: usize, text: &str) -> Value {
    json!({"type": "message", "role": "assistant", "id": format!("msg_{n}"), "status": "completed", "content": [{"type": "output_text", "text": text, "annotations": []}]})
}

/// Names of the tools a request offers, including those nested in
/// `additional_tools` namespaces.
pub fn offered_tools(body: &Value) -> Vec<String> {
    fn walk(tools: &Value, out: &mut Vec<String>) {
        for t in tools.as_array().into_iter().flatten() {
            if let Some(n) = t.get("name").and_then(Value::as_str) {
                out.push(n.to_string());
            }
            walk(&t["tools"], out);
        }
    }
    let mut out = Vec::new();
    walk(&body["tools"], &mut out);
    for item in body["input"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|i| i["type"] == "additional_tools")
    {
        walk(&item["tools"], &mut out);
    }
    out
}

fn tool_call(n: usize, body: &Value, tool: Tool<'_>) -> Value {
    let tools = offered_tools(body);
    let call_id = format!("call_{n}");
    let has = |name: &str| tools.iter().any(|t| t == name);
    if has("exec") && !has("exec_command") {
        // Code mode: one JavaScript tool orchestrating the nested ones.
        let js = match tool {
            Tool::Shell(cmd) => format!(
                "const r = await tools.exec_command({{cmd: {}}});\ntext(JSON.stringify(r));",
                json!(cmd)
            ),
            Tool::Patch(p) => format!(
                "const r = await tools.apply_patch({});\ntext(JSON.stringify(r));",
                json!(p)
            ),
        };
        return json!({"type": "custom_tool_call", "id": format!("ctc_{n}"), "status": "completed", "call_id": call_id, "name": "exec", "input": js});
    }
    match tool {
        Tool::Shell(cmd) => {
            json!({"type": "function_call", "id": format!("fc_{n}"), "status": "completed", "call_id": call_id, "name": "exec_command", "arguments": json!({"cmd": cmd}).to_string()})
        }
        Tool::Patch(p) if has("apply_patch") => {
            json!({"type": "custom_tool_call", "id": format!("ctc_{n}"), "status": "completed", "call_id": call_id, "name": "apply_patch", "input": p})
        }
        // No patch tool offered: apply it through the shell tool's heredoc form.
        Tool::Patch(p) => {
            json!({"type": "function_call", "id": format!("fc_{n}"), "status": "completed", "call_id": call_id, "name": "exec_command", "arguments": json!({"cmd": format!("apply_patch <<'PATCH'\n{p}\nPATCH")}).to_string()})
        }
    }
}

/// The SSE stream of one response holding `item`.
fn sse(n: usize, item: Value) -> ResponseTemplate {
    let id = format!("resp_{n}");
    let (input, cached, output, reasoning) = USAGE_PER_RESPONSE;
    let mut events = vec![
        json!({"type": "response.created", "response": {"id": id, "status": "in_progress"}}),
        json!({"type": "response.in_progress", "response": {"id": id, "status": "in_progress"}}),
        json!({"type": "response.output_item.added", "output_index": 0, "item": item}),
    ];
    if item["type"] == "message" {
        let text = item["content"][0]["text"].as_str().unwrap_or("");
        let item_id = item["id"].clone();
        events.push(json!({"type": "response.content_part.added", "item_id": item_id, "output_index": 0, "content_index": 0, "part": {"type": "output_text", "text": "", "annotations": []}}));
        // Two deltas: the CLI must join them.
        let mid = text
            .char_indices()
            .nth(text.chars().count() / 2)
            .map(|(i, _)| i)
            .unwrap_or(0);
        for d in [&text[..mid], &text[mid..]] {
            events.push(json!({"type": "response.output_text.delta", "item_id": item_id, "output_index": 0, "content_index": 0, "delta": d}));
        }
        events.push(json!({"type": "response.output_text.done", "item_id": item_id, "output_index": 0, "content_index": 0, "text": text}));
    }
    events.push(json!({"type": "response.output_item.done", "output_index": 0, "item": item}));
    events.push(json!({"type": "response.completed", "response": {"id": id, "status": "completed", "usage": {
        "input_tokens": input, "input_tokens_details": {"cached_tokens": cached},
        "output_tokens": output, "output_tokens_details": {"reasoning_tokens": reasoning},
        "total_tokens": input + output}}}));
    let mut body = String::new();
    for e in events {
        body.push_str(&format!(
            "event: {}\ndata: {}\n\n",
            e["type"].as_str().unwrap(),
            e
        ));
    }
    ResponseTemplate::new(200)
        .insert_header("content-type", "text/event-stream")
        .set_body_raw(body, "text/event-stream")
}

impl FakeResponses {
    /// Starts the server on 127.0.0.1 with a port of its own and `script`.
    pub async fn start(script: Vec<Reply>) -> FakeResponses {
        let server = MockServer::start().await;
        let state = Arc::new(Mutex::new(State {
            script: script.into(),
            requests: vec![],
            rate_limits: vec![],
        }));
        Mock::given(any())
            .respond_with(Responder {
                state: state.clone(),
            })
            .mount(&server)
            .await;
        FakeResponses { server, state }
    }

    /// Sends the rate-limit headers the service sends with every response
    /// from now on: the primary (5-hour) and secondary (weekly) windows'
    /// used percentages, lengths in minutes and resets (epoch seconds).
    pub fn rate_limits(&self, primary: (f64, i64, i64), secondary: (f64, i64, i64)) {
        let mut h = Vec::new();
        for (name, (used, minutes, reset)) in [("primary", primary), ("secondary", secondary)] {
            h.push((format!("x-codex-{name}-used-percent"), used.to_string()));
            h.push((
                format!("x-codex-{name}-window-minutes"),
                minutes.to_string(),
            ));
            h.push((format!("x-codex-{name}-reset-at"), reset.to_string()));
        }
        self.state.lock().unwrap().rate_limits = h;
    }

    /// The provider's `base_url` (`http://127.0.0.1:PORT/v1`).
    pub fn base_url(&self) -> String {
        format!("{}/v1", self.server.uri())
    }

    /// The `-c` arguments that point the real CLI at this server as model
    /// provider `fake`, its key read from `FAKE_KEY`.
    pub fn provider_args(&self) -> Vec<String> {
        vec![
            "-c".into(),
            "model_provider=fake".into(),
            "-c".into(),
            format!(
                r#"model_providers.fake={{name="fake",base_url="{}",wire_api="responses",env_key="FAKE_KEY"}}"#,
                self.base_url()
            ),
        ]
    }

    /// Bodies of the `POST /v1/responses` requests so far.
    pub fn bodies(&self) -> Vec<Value> {
        self.state
            .lock()
            .unwrap()
            .requests
            .iter()
            .filter(|(m, p, _)| m == "POST" && p == "/v1/responses")
            .map(|(_, _, b)| b.clone())
            .collect()
    }

    /// Replies not given yet.
    pub fn left(&self) -> usize {
        self.state.lock().unwrap().script.len()
    }
}

/// The user text of a request: every `input_text` of its `user` messages.
pub fn user_text(body: &Value) -> String {
    body["input"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|i| i["type"] == "message" && i["role"] == "user")
        .flat_map(|i| i["content"].as_array().cloned().unwrap_or_default())
        .filter_map(|c| c["text"].as_str().map(String::from))
        .collect::<Vec<_>>()
        .join("\n")
}

/// The outputs of tool calls the CLI sent back in a request (its view of
/// what its tools did).
pub fn tool_outputs(body: &Value) -> String {
    body["input"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|i| {
            i["type"]
                .as_str()
                .is_some_and(|t| t.ends_with("_call_output"))
        })
        .map(|i| i["output"].to_string())
        .collect::<Vec<_>>()
        .join("\n")
}
