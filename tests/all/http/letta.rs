//! Letta's conventions over REST: the injected `agent_state` parameter.

use serde_json::json;

use super::Service;

/// A Letta tool: `agent_state` first, as Letta writes them, and left out of the schema.
const REMEMBER: &str = r#"
def remember(agent_state: "AgentState", note: str) -> str:
    """Keeps a note in the agent's memory.

    Args:
        note: What to keep.
    """
    if agent_state is None:
        return "no agent: " + note
    return agent_state["name"] + " keeps: " + note
"#;

#[tokio::test]
async fn agent_state_is_what_the_caller_sends_beside_the_arguments_else_none() {
    let s = Service::start();
    let key = s.tenant(json!({})).await;
    let tool = s.register(&key, json!({"source": REMEMBER})).await;
    let view = s
        .send(
            axum::http::Method::GET,
            &format!("/v1/tools/{tool}"),
            Some(&key),
            None,
        )
        .await;
    let properties = &view.json["manifest"]["schema"]["parameters"]["properties"];
    assert!(properties.get("agent_state").is_none(), "{}", view.json);
    let alone = s.run(&key, &tool, json!({"note": "milk"})).await;
    assert_eq!(alone.json["value"], "no agent: milk", "{}", alone.json);
    let path = format!("/v1/tools/{tool}/run");
    let run = |body| s.send(axum::http::Method::POST, &path, Some(&key), Some(body));
    let with = run(json!({"arguments": {"note": "milk"}, "agent_state": {"name": "Ada"}})).await;
    assert_eq!(with.json["value"], "Ada keeps: milk", "{}", with.json);
    // Inside the arguments it is refused: the schema does not name it.
    let smuggled = run(json!({"arguments": {"note": "x", "agent_state": {"name": "Eve"}}})).await;
    assert_eq!(smuggled.code(), "invalid_arguments", "{}", smuggled.json);
    // A tool without the parameter never sees it.
    let plain = s
        .register(
            &key,
            json!({"source": "def echo(text: str) -> str:\n    return text\n"}),
        )
        .await;
    let r = s
        .send(
            axum::http::Method::POST,
            &format!("/v1/tools/{plain}/run"),
            Some(&key),
            Some(json!({"arguments": {"text": "hi"}, "agent_state": {"name": "Ada"}})),
        )
        .await;
    assert_eq!(r.json["value"], "hi", "{}", r.json);
}
