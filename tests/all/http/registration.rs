//! What registration refuses because every call of the tool would fail: a source
//! Python cannot compile, an explicit schema that cannot check arguments, zero limits.
//! Each is refused by POST, PUT and upload alike, and nothing is stored.

use axum::body::Body;
use axum::http::{Method, Request, StatusCode, header};
use serde_json::{Value, json};

use super::{ADD, Reply, Service};

fn add_schema(parameters: Value) -> Value {
    json!({"name": "add", "description": "Add two integers.", "parameters": parameters})
}

fn good_parameters() -> Value {
    json!({
        "type": "object",
        "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
        "required": ["a", "b"],
        "additionalProperties": false
    })
}

async fn upload(s: &Service, key: &str, file: &str, source: &str) -> Reply {
    let body = format!(
        "--XwardenX\r\nContent-Disposition: form-data; name=\"file\"; filename=\"{file}\"\r\n\r\n{source}\r\n--XwardenX--\r\n"
    );
    s.raw(
        Request::post("/v1/tools/upload")
            .header(header::AUTHORIZATION, format!("Bearer {key}"))
            .header(
                header::CONTENT_TYPE,
                "multipart/form-data; boundary=XwardenX",
            )
            .body(Body::from(body))
            .unwrap(),
    )
    .await
}

/// Asserts that POST and PUT both refuse `spec` with 422 `code`, and returns the
/// POST's message.
async fn refused(s: &Service, key: &str, tool: &str, spec: Value, code: &str) -> String {
    let put = s
        .send(
            Method::PUT,
            &format!("/v1/tools/{tool}"),
            Some(key),
            Some(spec.clone()),
        )
        .await;
    assert_eq!(
        (put.status, put.code()),
        (StatusCode::UNPROCESSABLE_ENTITY, code),
        "PUT {spec}: {}",
        put.json
    );
    let post = s
        .send(Method::POST, "/v1/tools", Some(key), Some(spec.clone()))
        .await;
    assert_eq!(
        (post.status, post.code()),
        (StatusCode::UNPROCESSABLE_ENTITY, code),
        "POST {spec}: {}",
        post.json
    );
    post.json["error"]["message"].as_str().unwrap().to_owned()
}

/// Asserts that the tenant still has exactly one tool, `tool`, at version 1.
async fn nothing_stored(s: &Service, key: &str, tool: &str) {
    let tools = s.send(Method::GET, "/v1/tools", Some(key), None).await;
    assert_eq!(
        tools.json["items"].as_array().unwrap().len(),
        1,
        "{}",
        tools.json
    );
    let versions = s
        .send(
            Method::GET,
            &format!("/v1/tools/{tool}/versions"),
            Some(key),
            None,
        )
        .await;
    assert_eq!(versions.json["items"].as_array().unwrap().len(), 1);
}

#[tokio::test]
async fn a_source_with_a_nul_byte_is_refused_at_registration() {
    let s = Service::start();
    let key = s.tenant(json!({})).await;
    let id = s.register(&key, json!({"source": ADD})).await;
    let nul = format!("{ADD}# a NUL \0 here\n");
    let message = refused(&s, &key, &id, json!({"source": nul}), "invalid_manifest").await;
    assert!(message.contains("NUL byte on line 4"), "{message}");
    // An explicit schema skips derivation, not this check.
    let explicit = json!({"source": nul, "schema": add_schema(good_parameters())});
    refused(&s, &key, &id, explicit, "invalid_manifest").await;
    let r = upload(&s, &key, "add.py", &nul).await;
    assert_eq!(
        (r.status, r.code()),
        (StatusCode::UNPROCESSABLE_ENTITY, "invalid_manifest"),
        "{}",
        r.json
    );
    let validated = s
        .send(
            Method::POST,
            "/v1/tools/validate",
            Some(&key),
            Some(json!({"source": nul})),
        )
        .await;
    assert_eq!(
        validated.status,
        StatusCode::UNPROCESSABLE_ENTITY,
        "{}",
        validated.json
    );
    nothing_stored(&s, &key, &id).await;
}

#[tokio::test]
async fn an_explicit_schema_that_cannot_check_arguments_is_422() {
    let s = Service::start();
    let key = s.tenant(json!({})).await;
    let id = s.register(&key, json!({"source": ADD})).await;
    let not_a_schema = json!({"type": "object", "properties": {"a": {"type": 5}}});
    let message = refused(
        &s,
        &key,
        &id,
        json!({"source": ADD, "schema": add_schema(not_a_schema)}),
        "invalid_schema",
    )
    .await;
    assert!(message.contains("explicit schema"), "{message}");
    let bad_pattern =
        json!({"type": "object", "properties": {"a": {"type": "string", "pattern": "(("}}});
    refused(
        &s,
        &key,
        &id,
        json!({"source": ADD, "schema": add_schema(bad_pattern)}),
        "invalid_schema",
    )
    .await;
    let not_an_object = json!({"type": "array"});
    let message = refused(
        &s,
        &key,
        &id,
        json!({"source": ADD, "schema": add_schema(not_an_object)}),
        "invalid_schema",
    )
    .await;
    assert!(message.contains("\"type\": \"object\""), "{message}");
    // The schema is given; the source must still parse and define the function.
    refused(
        &s,
        &key,
        &id,
        json!({"source": "def add(a, b:\n", "schema": add_schema(good_parameters())}),
        "invalid_source",
    )
    .await;
    refused(
        &s,
        &key,
        &id,
        json!({"source": ADD.replace("def add", "def plus"), "schema": add_schema(good_parameters())}),
        "invalid_source",
    )
    .await;
    nothing_stored(&s, &key, &id).await;

    // A usable explicit schema is kept, even for a function without annotations.
    let untyped = "def add(a, b):\n    return a + b\n";
    let r = s
        .send(
            Method::PUT,
            &format!("/v1/tools/{id}"),
            Some(&key),
            Some(json!({"source": untyped, "schema": add_schema(good_parameters())})),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.json);
    assert_eq!(
        s.run(&key, &id, json!({"a": 2, "b": 3})).await.json["value"],
        5
    );
}

#[tokio::test]
async fn limits_below_their_minimum_are_422() {
    let s = Service::start();
    let key = s.tenant(json!({})).await;
    let id = s.register(&key, json!({"source": ADD})).await;
    // 40 MiB less one byte: the runtime's snapshot alone needs 40 MiB.
    for (limit, value) in [
        ("fuel", 0),
        ("deadline_ms", 0),
        ("memory_bytes", 0),
        ("memory_bytes", 40 * 1024 * 1024 - 1),
        ("return_char_limit", 0),
    ] {
        let message = refused(
            &s,
            &key,
            &id,
            json!({"source": ADD, "limits": {limit: value}}),
            "invalid_limits",
        )
        .await;
        assert!(message.starts_with(limit), "{message}");
        assert!(message.contains("below the minimum"), "{message}");
    }
    nothing_stored(&s, &key, &id).await;

    let mut ceilings = json!({
        "fuel": 1_000_000_000u64, "deadline_ms": 5000, "memory_bytes": 134_217_728u64,
        "stdout_bytes": 65536, "stderr_bytes": 65536, "return_char_limit": 1000
    });
    for (limit, value) in [("return_char_limit", 0), ("memory_bytes", 1 << 20)] {
        let mut ceilings = ceilings.clone();
        ceilings[limit] = json!(value);
        let r = s
            .send(
                Method::POST,
                "/v1/admin/tenants",
                Some(super::OPERATOR_KEY),
                Some(json!({"name": "low", "policy": {"ceilings": ceilings}})),
            )
            .await;
        assert_eq!(
            (r.status, r.code()),
            (StatusCode::UNPROCESSABLE_ENTITY, "invalid_tenant"),
            "{}",
            r.json
        );
        let message = r.json["error"]["message"].as_str().unwrap();
        assert!(message.contains(limit), "{message}");
    }
    // A ceiling of zero on output is a tenant whose tools may print nothing.
    ceilings["stdout_bytes"] = json!(0);
    s.tenant(json!({"ceilings": ceilings})).await;
}

#[tokio::test]
async fn zero_output_caps_are_accepted_and_mean_no_output() {
    let s = Service::start();
    let key = s.tenant(json!({})).await;
    let quiet = json!({"source": ADD, "limits": {
        "stdout_bytes": 0, "stderr_bytes": 0, "memory_bytes": 40 * 1024 * 1024,
    }});
    let id = s.register(&key, quiet).await;
    let ran = s.run(&key, &id, json!({"a": 1, "b": 2})).await;
    assert_eq!(ran.status, StatusCode::OK, "{}", ran.json);
    assert_eq!(ran.json["status"], "ok", "{}", ran.json);

    let chatty = "def chatty() -> int:\n    \"\"\"Prints.\"\"\"\n    print('hi')\n    return 1\n";
    let id = s
        .register(
            &key,
            json!({"source": chatty, "limits": {"stdout_bytes": 0}}),
        )
        .await;
    let ran = s.run(&key, &id, json!({})).await;
    assert_eq!(ran.json["status"], "output_limit", "{}", ran.json);
}

/// An uploaded file whose name is no function's is registered as the file chooses, as
/// `warden run` chooses: its one decorated tool (a FastMCP server file, named after
/// the server rather than the tool), its one name in `__all__`; a file that leaves the
/// choice open is refused naming its functions.
#[tokio::test]
async fn an_upload_takes_the_function_its_file_chooses() {
    let s = Service::start();
    let key = s.tenant(json!({})).await;
    let desk = std::fs::read_to_string(crate::support::fixture("forecast.py")).unwrap();
    let r = upload(&s, &key, "weather_desk.py", &desk).await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.json);
    assert_eq!(r.json["tool"]["name"], "forecast");
    assert_eq!(r.json["manifest"]["function"], "forecast");
    let exported = "__all__ = ['twice']\n\ndef helper(x: int) -> int:\n    return x\n\n\
                    def twice(x: int) -> int:\n    \"\"\"Twice x.\"\"\"\n    return 2 * x\n";
    let r = upload(&s, &key, "maths.py", exported).await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.json);
    assert_eq!(r.json["tool"]["name"], "twice");
    let open = "def one(x: int) -> int:\n    return x\n\ndef two(x: int) -> int:\n    return x\n";
    let r = upload(&s, &key, "choices.py", open).await;
    assert_eq!(r.status, StatusCode::UNPROCESSABLE_ENTITY, "{}", r.json);
    let message = r.json["error"]["message"].as_str().unwrap();
    assert!(message.contains("`one`, `two`"), "{message}");
}

/// A tool's decorator names it, titles it and describes it, as FastMCP and the agent
/// frameworks do, wherever the spec says nothing; the spec's own values win.
#[tokio::test]
async fn a_tools_decorator_names_titles_and_describes_it() {
    let s = Service::start();
    let key = s.tenant(json!({})).await;
    let source = "from mcp.server.fastmcp import FastMCP\n\nmcp = FastMCP('d')\n\n\
                  @mcp.tool(name='lookup', title='Look up', description='Finds a key.')\n\
                  def find(key: str) -> str:\n    \"\"\"Docstring.\"\"\"\n    return key.upper()\n";
    let r = s
        .send(
            Method::POST,
            "/v1/tools",
            Some(&key),
            Some(json!({"source": source})),
        )
        .await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.json);
    assert_eq!(r.json["tool"]["name"], "lookup");
    assert_eq!(r.json["manifest"]["function"], "find");
    assert_eq!(r.json["manifest"]["title"], "Look up");
    assert_eq!(r.json["manifest"]["schema"]["description"], "Finds a key.");
    let id = r.json["tool"]["id"].as_str().unwrap();
    assert_eq!(
        s.run(&key, id, json!({"key": "k"})).await.json["value"],
        "K"
    );
    let r = s
        .send(
            Method::POST,
            "/v1/tools",
            Some(&key),
            Some(json!({"source": source, "name": "mine", "title": "Mine"})),
        )
        .await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.json);
    assert_eq!(r.json["tool"]["name"], "mine");
    assert_eq!(r.json["manifest"]["title"], "Mine");
}

/// `POST /v1/servers` registers every tool of a server file at once, each a tool of its
/// own; nothing is stored unless every one can be.
#[tokio::test]
async fn a_server_file_registers_each_of_its_tools() {
    let s = Service::start();
    let key = s.tenant(json!({})).await;
    let source = std::fs::read_to_string(crate::support::fixture("notebook.py")).unwrap();
    let post = |body: Value| s.send(Method::POST, "/v1/servers", Some(&key), Some(body));
    let r = post(json!({"source": source, "tags": ["notes"]})).await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.json);
    assert_eq!(r.json["server"]["revision"], 1, "{}", r.json);
    assert!(r.json["server"]["id"].as_str().unwrap().starts_with("srv_"));
    let tools = r.json["tools"].as_array().unwrap();
    let names: Vec<&str> = tools
        .iter()
        .map(|t| t["tool"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["page", "count", "titles"]);
    assert_eq!(tools[1]["manifest"]["function"], "word_count");
    assert_eq!(tools[1]["tool"]["tags"], json!(["notes"]));
    let count = tools[1]["tool"]["id"].as_str().unwrap();
    assert_eq!(
        s.run(&key, count, json!({"title": "todo"})).await.json["value"],
        3
    );
    let titles = tools[2]["tool"]["id"].as_str().unwrap();
    assert_eq!(
        s.run(&key, titles, json!({})).await.json["value"],
        json!(["intro", "todo"])
    );

    // Again: every name is taken, and nothing more is stored.
    let again = post(json!({"source": source})).await;
    assert_eq!(
        (again.status, again.code()),
        (StatusCode::CONFLICT, "name_taken")
    );
    let listed = s.send(Method::GET, "/v1/tools", Some(&key), None).await;
    assert_eq!(listed.json["items"].as_array().unwrap().len(), 3);

    let chosen = post(json!({"source": source, "function": "page"})).await;
    assert_eq!(
        (chosen.status, chosen.code()),
        (StatusCode::UNPROCESSABLE_ENTITY, "invalid_server")
    );
    let plain = post(json!({"source": ADD})).await;
    assert_eq!(
        (plain.status, plain.code()),
        (StatusCode::UNPROCESSABLE_ENTITY, "invalid_server")
    );
    assert!(
        plain.json["error"]["message"]
            .as_str()
            .unwrap()
            .contains("POST /v1/tools")
    );
}

/// `PUT /v1/servers/{id}` makes a new source the file of every tool of the server, as its
/// next revision: a tool still declared gets a version and keeps its own grants, limits,
/// tags and switch; a tool the file adds is registered; one it drops is disabled. `GET
/// /v1/servers/{id}` shows one history of the file across its tools; another tenant's
/// server, or a malformed id, is not found.
#[tokio::test]
async fn a_server_file_is_updated_as_one_with_one_history() {
    let s = Service::start();
    let key = s.tenant(json!({})).await;
    let source = std::fs::read_to_string(crate::support::fixture("notebook.py")).unwrap();
    let r = s
        .send(
            Method::POST,
            "/v1/servers",
            Some(&key),
            Some(json!({"source": source})),
        )
        .await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.json);
    let server = r.json["server"]["id"].as_str().unwrap().to_owned();
    let id_of = |json: &Value, name: &str| {
        json["tools"]
            .as_array()
            .unwrap()
            .iter()
            .find(|t| t["tool"]["name"] == name)
            .map(|t| t["tool"]["id"].as_str().unwrap().to_owned())
            .unwrap_or_else(|| panic!("no tool {name} in {json}"))
    };
    let (page, count) = (id_of(&r.json, "page"), id_of(&r.json, "count"));
    // One tool's own settings, changed on its own.
    let mut spec = json!({"source": source, "function": "word_count",
                          "limits": {"deadline_ms": 3000}, "tags": ["kept"]});
    let put = s
        .send(
            Method::PUT,
            &format!("/v1/tools/{count}"),
            Some(&key),
            Some(spec.take()),
        )
        .await;
    assert_eq!(put.status, StatusCode::OK, "{}", put.json);

    // The next revision: `page` changes, `titles` goes, `search` comes.
    let next = source
        .replace(
            "return PAGES.get(title, \"\")\n\n\n@app.tool(name",
            "return PAGES.get(title, \"?\")\n\n\n@app.tool(name",
        )
        .replace("@app.tool()\nasync def titles", "async def _titles")
        + "\n\n@app.tool\ndef search(word: str) -> list[str]:\n    \"\"\"Pages with a word.\"\"\"\n    return sorted(t for t, p in PAGES.items() if word in p)\n";
    let path = format!("/v1/servers/{server}");
    let r = s
        .send(
            Method::PUT,
            &path,
            Some(&key),
            Some(json!({"source": next})),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.json);
    assert_eq!(r.json["server"]["revision"], 2, "{}", r.json);
    let names: Vec<&str> = r.json["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["tool"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["page", "count", "search"]);
    assert_eq!(
        r.json["disabled"][0]["tool"]["name"], "titles",
        "{}",
        r.json
    );
    assert_eq!(r.json["disabled"][0]["tool"]["enabled"], false);
    assert_eq!(id_of(&r.json, "page"), page, "the same tool, a new version");
    let counted = &r.json["tools"][1];
    assert_eq!(counted["version"], 3, "{counted}");
    assert_eq!(
        counted["manifest"]["limits"]["deadline_ms"], 3000,
        "{counted}"
    );
    assert_eq!(counted["tool"]["tags"], json!(["kept"]), "{counted}");
    assert_eq!(
        s.run(&key, &page, json!({"title": "nowhere"})).await.json["value"],
        "?"
    );
    let search = id_of(&r.json, "search");
    assert_eq!(
        s.run(&key, &search, json!({"word": "tests"})).await.json["value"],
        json!(["todo"])
    );

    let detail = s.send(Method::GET, &path, Some(&key), None).await;
    assert_eq!(detail.status, StatusCode::OK, "{}", detail.json);
    assert_eq!(detail.json["server"]["revision"], 2);
    assert_eq!(detail.json["tools"].as_array().unwrap().len(), 4);
    let history = detail.json["history"].as_array().unwrap();
    let revisions: Vec<u64> = history
        .iter()
        .map(|h| h["revision"].as_u64().unwrap())
        .collect();
    assert_eq!(revisions, [1, 2], "{}", detail.json);
    let held = |n: usize| {
        let mut v: Vec<String> = history[n]["versions"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| format!("{}@{}", v["name"].as_str().unwrap(), v["version"]))
            .collect();
        v.sort();
        v
    };
    // `count`'s own update stayed in revision 1.
    assert_eq!(held(0), ["count@1", "count@2", "page@1", "titles@1"]);
    assert_eq!(held(1), ["count@3", "page@2", "search@1"]);

    // The same file again: nothing changes, the revision stays.
    let again = s
        .send(
            Method::PUT,
            &path,
            Some(&key),
            Some(json!({"source": next})),
        )
        .await;
    assert_eq!(again.status, StatusCode::OK, "{}", again.json);
    assert_eq!(again.json["server"]["revision"], 2, "{}", again.json);
    assert_eq!(
        again.json["tools"][0]["update"], "unchanged",
        "{}",
        again.json
    );
    let detail = s.send(Method::GET, &path, Some(&key), None).await;
    assert_eq!(detail.json["history"].as_array().unwrap().len(), 2);

    // Not another tenant's, nor a malformed id.
    let other = s.tenant(json!({})).await;
    let theirs = s.send(Method::GET, &path, Some(&other), None).await;
    assert_eq!(
        (theirs.status, theirs.code()),
        (StatusCode::NOT_FOUND, "not_found")
    );
    let put = s
        .send(
            Method::PUT,
            &path,
            Some(&other),
            Some(json!({"source": next})),
        )
        .await;
    assert_eq!(put.status, StatusCode::NOT_FOUND, "{}", put.json);
    let bad = s
        .send(Method::GET, "/v1/servers/srv_nope", Some(&key), None)
        .await;
    assert_eq!(bad.status, StatusCode::NOT_FOUND);
    // A file that declares nothing is refused, and changes nothing.
    let empty = s
        .send(
            Method::PUT,
            &path,
            Some(&key),
            Some(json!({"source": "x = 1\n"})),
        )
        .await;
    assert_eq!(
        (empty.status, empty.code()),
        (StatusCode::UNPROCESSABLE_ENTITY, "invalid_server")
    );
}

/// A server file's decorator tags become its tools' tags when the spec gives none (a
/// tag Warden cannot hold is left out); the spec's own tags win.
#[tokio::test]
async fn a_decorators_tags_label_the_tool_unless_the_spec_gives_some() {
    let s = Service::start();
    let key = s.tenant(json!({})).await;
    let source = "from fastmcp import FastMCP\n\nmcp = FastMCP(\"n\")\n\n\n\
                  @mcp.tool(tags={\"notes\", \"Not A Tag\", \"search\"})\n\
                  def find(word: str) -> str:\n    \"\"\"Finds.\"\"\"\n    return word\n";
    let r = s
        .send(
            Method::POST,
            "/v1/servers",
            Some(&key),
            Some(json!({"source": source})),
        )
        .await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.json);
    assert_eq!(
        r.json["tools"][0]["tool"]["tags"],
        json!(["notes", "search"])
    );
    let r = s
        .send(
            Method::POST,
            "/v1/tools",
            Some(&key),
            Some(json!({"source": source, "name": "find2", "tags": ["mine"]})),
        )
        .await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.json);
    assert_eq!(r.json["tool"]["tags"], json!(["mine"]));
}
