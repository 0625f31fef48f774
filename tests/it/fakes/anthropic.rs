//! A local Anthropic Messages API for tests: the real Claude Code CLI is
//! pointed at it with `ANTHROPIC_BASE_URL` (offline).
//!
//! `POST /v1/messages` answers from a per-role script, streamed as SSE
//! (message_start, content_block_start/delta/stop, message_delta,
//! message_stop) or as one JSON message when the request is not streamed.
//! A request whose tool list holds `Edit` or `Write` is a writer's turn; one
//! with tools but neither is a reviewer's turn; one without tools is a side
//! call of the CLI (titles, quota probes) and gets a short text answer that
//! consumes no script step. An exhausted script answers a plain text turn
//! so the CLI always ends. `count_tokens` and any other endpoint get a small
//! well-formed answer, so the CLI never waits on the network.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use serde_json::{Value, json};
use wiremock::{Mock, MockServer, Request, Respond, ResponseTemplate, matchers::any};

/// One scripted model turn.
#[derive(Debug, Clone)]
pub enum Reply {
    /// A text answer ending the turn (`stop_reason: end_turn`).
    Text(String),
    /// Optional text, then one `tool_use` block per (tool name, input);
    /// the CLI runs the tools and sends their results in its next request.
    Tools(Option<String>, Vec<(String, Value)>),
    /// The 429 the real service gives a subscription that used its 5-hour
    /// window: `anthropic-ratelimit-unified-status: rejected` and the reset
    /// as epoch seconds in `anthropic-ratelimit-unified-reset`.
    UsageLimit {
        /// Reset instant, epoch seconds.
        reset_epoch: i64,
    },
    /// An API error: this HTTP status with the service's error body
    /// `{"type":"error","error":{"type":KIND,"message":MESSAGE}}`.
    ApiError {
        /// HTTP status (400, 401, 529, …).
        status: u16,
        /// The error's `type` (`invalid_request_error`, `authentication_error`, `overloaded_error`).
        kind: String,
        /// The error's `message`.
        message: String,
    },
}

/// Which script a request draws from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Turn {
    /// Tools include Edit or Write.
    Writer,
    /// Tools, but no Edit or Write.
    Reviewer,
    /// No tools at all (a side call of the CLI).
    Side,
}

/// Tokens every scripted answer reports: input, output. Fixed so tests can
/// check the CLI's sums.
pub const TOKENS_IN: u64 = 1200;
/// Output tokens per scripted answer.
pub const TOKENS_OUT: u64 = 80;

/// A request the fake saw.
#[derive(Debug, Clone)]
pub struct Seen {
    /// Method and path.
    pub method: String,
    /// Path only.
    pub path: String,
    /// The turn kind (`/v1/messages` only).
    pub turn: Option<Turn>,
    /// The JSON body (Null when not JSON).
    pub body: Value,
    /// Request headers, lowercase names.
    pub headers: Vec<(String, String)>,
}

#[derive(Default)]
struct Script {
    writer: VecDeque<Reply>,
    reviewer: VecDeque<Reply>,
    seen: Vec<Seen>,
    next_id: u64,
    /// Response headers of the coming writer and reviewer turns, one set
    /// each (the quota gauges); the last set stays once they run out.
    quota: VecDeque<Vec<(String, String)>>,
    quota_now: Vec<(String, String)>,
    /// Per-item answers for concurrent workers (see [`FakeAnthropic::by_item`]).
    items: Vec<ByItem>,
}

/// The answers to every request whose body holds `needle` (an item's
/// title): the writer's first turn, its turns after a tool result, the
/// reviewer's turn, and the response headers (quota gauges).
#[derive(Clone)]
struct ByItem {
    needle: String,
    first: Reply,
    after_tool: Reply,
    reviewer: Reply,
    headers: Vec<(String, String)>,
}

/// The fake server; dropped with the test.
pub struct FakeAnthropic {
    /// The wiremock server.
    pub server: MockServer,
    script: Arc<Mutex<Script>>,
}

struct Responder(Arc<Mutex<Script>>);

fn turn_of(body: &Value) -> Turn {
    let names: Vec<&str> = body
        .get("tools")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(|t| t.get("name").and_then(Value::as_str))
                .collect()
        })
        .unwrap_or_default();
    if names.is_empty() {
        Turn::Side
    } else if names.iter().any(|n| *n == "Edit" || *n == "Write") {
        Turn::Writer
    } else {
        Turn::Reviewer
    }
}

fn sse(events: &[Value]) -> String {
    let mut out = String::new();
    for e in events {
        out.push_str(&format!(
            "event: {}\ndata: {}\n\n",
            e["type"].as_str().unwrap_or("ping"),
            e
        ));
    }
    out
}

/// The content blocks of a reply.
fn blocks(reply: &Reply, id: u64) -> (Vec<Value>, &'static str) {
    match reply {
        Reply::Text(t) => (vec![json!({"type": "text", "text": t})], "end_turn"),
        Reply::Tools(text, calls) => {
            let mut v: Vec<Value> = text
                .iter()
                .map(|t| json!({"type": "text", "text": t}))
                .collect();
            for (i, (name, input)) in calls.iter().enumerate() {
                v.push(json!({"type": "tool_use", "id": format!("toolu_fake{id:04}{i:02}"), "name": name, "input": input}));
            }
            (v, "tool_use")
        }
        Reply::UsageLimit { .. } | Reply::ApiError { .. } => (vec![], "end_turn"),
    }
}

fn message_response(reply: &Reply, model: &str, stream: bool, id: u64) -> ResponseTemplate {
    if let Reply::UsageLimit { reset_epoch } = reply {
        return ResponseTemplate::new(429)
            .insert_header("anthropic-ratelimit-unified-status", "rejected")
            .insert_header("anthropic-ratelimit-unified-reset", reset_epoch.to_string().as_str())
            .insert_header("anthropic-ratelimit-unified-representative-claim", "five_hour")
            .insert_header("anthropic-ratelimit-unified-5h-status", "rejected")
            .insert_header("anthropic-ratelimit-unified-5h-reset", reset_epoch.to_string().as_str())
            .insert_header("request-id", format!("req_fake{id:04}").as_str())
            .set_body_json(json!({"type": "error", "error": {"type": "rate_limit_error", "message": "This request would exceed your account's rate limit. Please try again later."}}));
    }
    if let Reply::ApiError {
        status,
        kind,
        message,
    } = reply
    {
        return ResponseTemplate::new(*status)
            .insert_header("request-id", format!("req_fake{id:04}").as_str())
            .insert_header("x-should-retry", "false")
            .set_body_json(json!({"type": "error", "error": {"type": kind, "message": message}, "request_id": format!("req_fake{id:04}")}));
    }
    let (content, stop) = blocks(reply, id);
    let msg_id = format!("msg_fake{id:04}");
    let usage_start = json!({"input_tokens": TOKENS_IN, "output_tokens": 1, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0});
    if !stream {
        let body = json!({"id": msg_id, "type": "message", "role": "assistant", "model": model, "content": content, "stop_reason": stop, "stop_sequence": null,
            "usage": {"input_tokens": TOKENS_IN, "output_tokens": TOKENS_OUT, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0}});
        return ResponseTemplate::new(200)
            .insert_header("request-id", format!("req_fake{id:04}").as_str())
            .set_body_json(body);
    }
    let mut ev = vec![
        json!({"type": "message_start", "message": {"id": msg_id, "type": "message", "role": "assistant", "model": model, "content": [], "stop_reason": null, "stop_sequence": null, "usage": usage_start}}),
        json!({"type": "ping"}),
    ];
    for (i, b) in content.iter().enumerate() {
        match b["type"].as_str() {
            Some("text") => {
                ev.push(json!({"type": "content_block_start", "index": i, "content_block": {"type": "text", "text": ""}}));
                ev.push(json!({"type": "content_block_delta", "index": i, "delta": {"type": "text_delta", "text": b["text"]}}));
            }
            _ => {
                ev.push(json!({"type": "content_block_start", "index": i, "content_block": {"type": "tool_use", "id": b["id"], "name": b["name"], "input": {}}}));
                ev.push(json!({"type": "content_block_delta", "index": i, "delta": {"type": "input_json_delta", "partial_json": b["input"].to_string()}}));
            }
        }
        ev.push(json!({"type": "content_block_stop", "index": i}));
    }
    ev.push(json!({"type": "message_delta", "delta": {"stop_reason": stop, "stop_sequence": null}, "usage": {"output_tokens": TOKENS_OUT}}));
    ev.push(json!({"type": "message_stop"}));
    ResponseTemplate::new(200)
        .insert_header("content-type", "text/event-stream")
        .insert_header("cache-control", "no-cache")
        .insert_header("request-id", format!("req_fake{id:04}").as_str())
        .set_body_raw(sse(&ev), "text/event-stream")
}

impl Respond for Responder {
    fn respond(&self, req: &Request) -> ResponseTemplate {
        let mut st = self.0.lock().expect("fake anthropic state");
        let body: Value = serde_json::from_slice(&req.body).unwrap_or(Value::Null);
        let path = req.url.path().to_string();
        let method = req.method.to_string();
        let headers = req
            .headers
            .iter()
            .map(|(k, v)| {
                (
                    k.as_str().to_lowercase(),
                    v.to_str().unwrap_or("").to_string(),
                )
            })
            .collect();
        st.next_id += 1;
        let id = st.next_id;
        let turn = (method == "POST" && path == "/v1/messages").then(|| turn_of(&body));
        st.seen.push(Seen {
            method: method.clone(),
            path: path.clone(),
            turn,
            body: body.clone(),
            headers,
        });
        match (method.as_str(), path.as_str()) {
            ("POST", "/v1/messages") if st.items.iter().any(|i| body.to_string().contains(&i.needle)) => {
                let text = body.to_string();
                let it = st.items.iter().find(|i| text.contains(&i.needle)).cloned().unwrap();
                let model = body["model"].as_str().unwrap_or("claude-sonnet-4-5").to_string();
                let stream = body["stream"].as_bool().unwrap_or(false);
                let reply = match turn {
                    Some(Turn::Writer) if text.contains("tool_result") => it.after_tool,
                    Some(Turn::Writer) => it.first,
                    Some(Turn::Reviewer) => it.reviewer,
                    _ => Reply::Text("ok".into()),
                };
                it.headers
                    .iter()
                    .fold(message_response(&reply, &model, stream, id), |t, (k, v)| {
                        t.insert_header(k.as_str(), v.as_str())
                    })
            }
            ("POST", "/v1/messages") => {
                let model = body["model"].as_str().unwrap_or("claude-sonnet-4-5").to_string();
                let stream = body["stream"].as_bool().unwrap_or(false);
                let reply = match turn {
                    Some(Turn::Writer) => st.writer.pop_front(),
                    Some(Turn::Reviewer) => st.reviewer.pop_front(),
                    _ => Some(Reply::Text("ok".into())),
                }
                .unwrap_or_else(|| Reply::Text("(the fake's script is exhausted)".into()));
                if matches!(turn, Some(Turn::Writer | Turn::Reviewer))
                    && let Some(next) = st.quota.pop_front()
                {
                    st.quota_now = next;
                }
                st.quota_now
                    .iter()
                    .fold(message_response(&reply, &model, stream, id), |t, (k, v)| {
                        t.insert_header(k.as_str(), v.as_str())
                    })
            }
            ("POST", "/v1/messages/count_tokens") => ResponseTemplate::new(200).set_body_json(json!({"input_tokens": TOKENS_IN})),
            ("HEAD", _) | ("GET", "/") => ResponseTemplate::new(200),
            _ => ResponseTemplate::new(404).set_body_json(json!({"type": "error", "error": {"type": "not_found_error", "message": format!("{method} {path} is not served by the fake")}})),
        }
    }
}

impl FakeAnthropic {
    /// Starts the server on 127.0.0.1 with empty scripts.
    pub async fn start() -> FakeAnthropic {
        let server = MockServer::start().await;
        let script = Arc::new(Mutex::new(Script::default()));
        Mock::given(any())
            .respond_with(Responder(script.clone()))
            .mount(&server)
            .await;
        FakeAnthropic { server, script }
    }

    /// Quota gauges: the response headers of the coming writer and
    /// reviewer turns, one set per turn in order (see [`unified`]); side
    /// calls get the current set, and the last set stays once they run out.
    pub fn quota(&self, per_turn: impl IntoIterator<Item = Vec<(String, String)>>) -> &Self {
        self.script.lock().unwrap().quota.extend(per_turn);
        self
    }

    /// Answers every request whose body holds `needle` (an item's title)
    /// without the scripts, whatever order concurrent workers ask in: the
    /// writer's first turn `first`, its turns after a tool result
    /// `after_tool`, the reviewer's turn `reviewer`; `headers` on each.
    pub fn by_item(
        &self,
        needle: &str,
        (first, after_tool): (Reply, Reply),
        reviewer: Reply,
        headers: Vec<(String, String)>,
    ) -> &Self {
        self.script.lock().unwrap().items.push(ByItem {
            needle: needle.to_string(),
            first,
            after_tool,
            reviewer,
            headers,
        });
        self
    }

    /// The base URL for `ANTHROPIC_BASE_URL`.
    pub fn uri(&self) -> String {
        self.server.uri()
    }

    /// Appends writer turns.
    pub fn writer(&self, replies: impl IntoIterator<Item = Reply>) -> &Self {
        self.script.lock().unwrap().writer.extend(replies);
        self
    }

    /// Appends reviewer turns.
    pub fn reviewer(&self, replies: impl IntoIterator<Item = Reply>) -> &Self {
        self.script.lock().unwrap().reviewer.extend(replies);
        self
    }

    /// Every request seen so far.
    pub fn seen(&self) -> Vec<Seen> {
        self.script.lock().unwrap().seen.clone()
    }

    /// `/v1/messages` requests of one turn kind.
    pub fn turns(&self, kind: Turn) -> Vec<Seen> {
        self.seen()
            .into_iter()
            .filter(|s| s.turn == Some(kind))
            .collect()
    }

    /// Scripted turns not yet used (writer, reviewer).
    pub fn left(&self) -> (usize, usize) {
        let st = self.script.lock().unwrap();
        (st.writer.len(), st.reviewer.len())
    }
}

/// A tool call: (name, input).
pub fn tool(name: &str, input: Value) -> (String, Value) {
    (name.to_string(), input)
}

/// The unified rate-limit headers the service sends a subscription login
/// (the CLI turns them into `rate_limit_event`s): the 5-hour and 7-day
/// windows' utilization as fractions (`0.7` = 70 %), their resets (epoch
/// seconds), status `allowed`, overage refused unless `overage_in_use`
/// (then `anthropic-ratelimit-unified-overage-in-use: true`).
pub fn unified(
    five_hour: f64,
    seven_day: f64,
    resets: (i64, i64),
    overage_in_use: bool,
) -> Vec<(String, String)> {
    let mut h: Vec<(String, String)> = [
        ("anthropic-ratelimit-unified-status", "allowed".to_string()),
        ("anthropic-ratelimit-unified-reset", resets.0.to_string()),
        (
            "anthropic-ratelimit-unified-representative-claim",
            "five_hour".to_string(),
        ),
        (
            "anthropic-ratelimit-unified-5h-utilization",
            five_hour.to_string(),
        ),
        ("anthropic-ratelimit-unified-5h-reset", resets.0.to_string()),
        (
            "anthropic-ratelimit-unified-5h-status",
            "allowed".to_string(),
        ),
        (
            "anthropic-ratelimit-unified-7d-utilization",
            seven_day.to_string(),
        ),
        ("anthropic-ratelimit-unified-7d-reset", resets.1.to_string()),
        (
            "anthropic-ratelimit-unified-7d-status",
            "allowed".to_string(),
        ),
        (
            "anthropic-ratelimit-unified-overage-status",
            if overage_in_use {
                "allowed"
            } else {
                "rejected"
            }
            .to_string(),
        ),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect();
    if overage_in_use {
        h.push((
            "anthropic-ratelimit-unified-overage-in-use".into(),
            "true".into(),
        ));
    }
    h
}
