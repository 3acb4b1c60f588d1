//! The API against its own OpenAPI document, property-based: for every operation the
//! served document lists, generated requests get a status the document lists for that
//! operation, never a 5xx, and a body matching the documented schema (the error schema
//! for every error).
//!
//! Requests are built from the document itself: bodies generated from the documented
//! request schema, known-good bodies, and mutations of both (a value of the wrong type,
//! a missing or unknown field, huge or negative numbers, long strings), bodies that are
//! not JSON objects or not JSON at all, wrong content types; path ids that exist, do not
//! exist, are malformed or do not decode; query values per the documented parameters or
//! of the wrong type; and the right key, no key, a wrong one or the other kind of key.
//!
//! Each case runs against a fresh service (a tenant with one tool), so cases are
//! independent. `WARDEN_API_CASES` sets the number of cases (default 128: a few seconds).

use std::collections::HashMap;
use std::sync::Arc;

use axum::body::Body;
use axum::http::{Method, Request, StatusCode, header};
use proptest::prelude::*;
use proptest::strategy::Union;
use proptest::test_runner::{Config, TestRunner};
use serde_json::{Map, Value, json};

use super::{ADD, OPERATOR_KEY, Reply, Service};

/// One operation of the document.
#[derive(Debug, Clone)]
struct Op {
    method: Method,
    /// The path template, `{id}` and all.
    path: String,
    /// `tenantKey`, `operatorKey` or none.
    scheme: Option<String>,
    /// Query parameters: name and schema.
    query: Vec<(String, Value)>,
    /// The request body's media type and schema.
    body: Option<(String, Value)>,
    /// The documented answers, by status.
    responses: Map<String, Value>,
}

/// Every operation of `doc`.
fn operations(doc: &Value) -> Vec<Op> {
    let mut ops = Vec::new();
    for (path, item) in doc["paths"].as_object().unwrap() {
        for (method, op) in item.as_object().unwrap() {
            let scheme = op["security"]
                .as_array()
                .and_then(|s| s.first())
                .and_then(|r| r.as_object())
                .and_then(|r| r.keys().next().cloned());
            let query = op["parameters"]
                .as_array()
                .into_iter()
                .flatten()
                .filter(|p| p["in"] == "query")
                .map(|p| (p["name"].as_str().unwrap().to_owned(), p["schema"].clone()))
                .collect();
            let body = op["requestBody"]["content"]
                .as_object()
                .and_then(|c| c.iter().next())
                .map(|(media, c)| (media.clone(), c["schema"].clone()));
            ops.push(Op {
                method: Method::from_bytes(method.to_uppercase().as_bytes()).unwrap(),
                path: path.clone(),
                scheme,
                query,
                body,
                responses: op["responses"].as_object().unwrap().clone(),
            });
        }
    }
    ops
}

/// Follows `$ref`s into `doc`'s components.
fn resolve<'a>(doc: &'a Value, schema: &'a Value) -> &'a Value {
    match schema["$ref"].as_str() {
        Some(r) => resolve(doc, doc.pointer(r.trim_start_matches('#')).unwrap()),
        None => schema,
    }
}

/// Values valid per `schema`, at most `depth` levels deep.
fn valid(doc: &Value, schema: &Value, depth: u32) -> BoxedStrategy<Value> {
    let schema = resolve(doc, schema);
    let leaf = || {
        prop_oneof![
            Just(Value::Null),
            any::<i32>().prop_map(Value::from),
            "[a-z]{0,6}".prop_map(Value::from)
        ]
        .boxed()
    };
    if let Some(values) = schema["enum"].as_array() {
        return proptest::sample::select(values.clone()).boxed();
    }
    for key in ["oneOf", "anyOf"] {
        if let Some(options) = schema[key].as_array() {
            let arms: Vec<_> = options.iter().map(|s| valid(doc, s, depth)).collect();
            return Union::new(arms).boxed();
        }
    }
    if let Some(parts) = schema["allOf"].as_array() {
        let parts: Vec<_> = parts.iter().map(|s| valid(doc, s, depth)).collect();
        return parts
            .prop_map(|values| {
                let mut merged = Map::new();
                for v in values {
                    if let Value::Object(m) = v {
                        merged.extend(m);
                    }
                }
                Value::Object(merged)
            })
            .boxed();
    }
    let types: Vec<String> = match &schema["type"] {
        Value::String(t) => vec![t.clone()],
        Value::Array(ts) => ts.iter().map(|t| t.as_str().unwrap().to_owned()).collect(),
        _ => return leaf(),
    };
    let arms: Vec<BoxedStrategy<Value>> = types
        .iter()
        .map(|t| match t.as_str() {
            "null" => Just(Value::Null).boxed(),
            "boolean" => any::<bool>().prop_map(Value::from).boxed(),
            "integer" => {
                let min = schema["minimum"].as_i64().unwrap_or(-1000);
                let max = schema["maximum"].as_i64().unwrap_or(min + 100_000);
                (min..=max).prop_map(Value::from).boxed()
            }
            "number" => (-1e6f64..1e6).prop_map(Value::from).boxed(),
            "string" => match schema["pattern"].as_str() {
                Some(p) => proptest::string::string_regex(p)
                    .unwrap()
                    .prop_map(Value::from)
                    .boxed(),
                None => "[a-zA-Z0-9_ ./-]{0,12}".prop_map(Value::from).boxed(),
            },
            "array" if depth > 0 => {
                let max = schema["maxItems"].as_u64().unwrap_or(3).min(3) as usize;
                let min = schema["minItems"].as_u64().unwrap_or(0) as usize;
                proptest::collection::vec(valid(doc, &schema["items"], depth - 1), min..=max)
                    .prop_map(Value::Array)
                    .boxed()
            }
            "object" if depth > 0 => object(doc, schema, depth),
            "array" => Just(json!([])).boxed(),
            _ => Just(json!({})).boxed(),
        })
        .collect();
    Union::new(arms).boxed()
}

/// Objects valid per an object `schema`: every required property, some optional ones.
fn object(doc: &Value, schema: &Value, depth: u32) -> BoxedStrategy<Value> {
    let required: Vec<&str> = schema["required"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect();
    let Some(properties) = schema["properties"].as_object() else {
        return Just(json!({})).boxed();
    };
    let fields: Vec<BoxedStrategy<Option<(String, Value)>>> = properties
        .iter()
        .map(|(name, s)| {
            let is_required = required.contains(&name.as_str());
            let name = name.clone();
            let value = valid(doc, s, depth - 1).prop_map(move |v| (name.clone(), v));
            if is_required {
                value.prop_map(Some).boxed()
            } else {
                proptest::option::of(value).boxed()
            }
        })
        .collect();
    fields
        .prop_map(|fields| Value::Object(fields.into_iter().flatten().collect()))
        .boxed()
}

/// A change that makes a valid JSON value (likely) invalid.
#[derive(Debug, Clone)]
enum Mutation {
    /// Replace the value at the chosen place with this one.
    Replace(Value),
    /// Replace it with a number too large for any integer type.
    Huge,
    /// Remove it from its object.
    Remove,
    /// Add an unknown field to the chosen object.
    Unknown,
}

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        proptest::sample::select(vec![
            Value::Null,
            json!(true),
            json!(-1),
            json!(0),
            json!(1.5),
            json!(u64::MAX),
            json!(i64::MIN),
            json!(1e300),
            json!(""),
            json!("x"),
            json!([]),
            json!([1, "a"]),
            json!({}),
            json!({"x": 1}),
            Value::String("y".repeat(20_000)),
        ])
        .prop_map(Mutation::Replace),
        Just(Mutation::Huge),
        Just(Mutation::Remove),
        Just(Mutation::Unknown),
    ]
}

/// Every JSON pointer into `value`, itself included.
fn pointers(value: &Value, at: String, out: &mut Vec<String>) {
    match value {
        Value::Object(m) => {
            for (k, v) in m {
                pointers(
                    v,
                    format!("{at}/{}", k.replace('~', "~0").replace('/', "~1")),
                    out,
                );
            }
        }
        Value::Array(a) => {
            for (i, v) in a.iter().enumerate() {
                pointers(v, format!("{at}/{i}"), out);
            }
        }
        _ => {}
    }
    out.push(at);
}

/// The JSON text of `value` with `mutation` applied at its `choice`-th place.
fn mutate(mut value: Value, mutation: &Mutation, choice: usize) -> String {
    const HUGE: &str = "\u{1}huge\u{1}";
    let mut places = Vec::new();
    pointers(&value, String::new(), &mut places);
    let at = &places[choice % places.len()];
    match mutation {
        Mutation::Replace(v) => match value.pointer_mut(at) {
            Some(slot) => *slot = v.clone(),
            None => value = v.clone(),
        },
        Mutation::Huge => {
            if let Some(slot) = value.pointer_mut(at) {
                *slot = Value::from(HUGE);
            }
        }
        Mutation::Remove => {
            let (parent, key) = at.rsplit_once('/').unwrap_or(("", ""));
            if let Some(Value::Object(m)) = value.pointer_mut(parent) {
                m.remove(key);
            }
        }
        Mutation::Unknown => {
            if let Some(Value::Object(m)) = value.pointer_mut(at) {
                m.insert("unknown_field".into(), json!(1));
            }
        }
    }
    value
        .to_string()
        .replace(&format!("\"{HUGE}\""), "123456789012345678901234567890")
}

/// Which key a request carries.
#[derive(Debug, Clone)]
enum Key {
    /// The one the operation asks for (the tenant's or the operator's).
    Right,
    /// The right one with the scheme in lower case and padded.
    RightLowerCase,
    /// None.
    Absent,
    /// The other kind of key.
    OtherKind,
    /// A well-formed tenant key that no tenant has.
    Unknown,
    /// Any header value.
    Garbage(String),
    /// Another scheme.
    Basic,
}

fn key() -> impl Strategy<Value = Key> {
    prop_oneof![
        12 => Just(Key::Right),
        1 => Just(Key::RightLowerCase),
        2 => Just(Key::Absent),
        1 => Just(Key::OtherKind),
        1 => Just(Key::Unknown),
        1 => "[ -~]{0,30}".prop_map(Key::Garbage),
        1 => Just(Key::Basic),
    ]
}

/// Which id fills a path's `{id}`.
#[derive(Debug, Clone)]
enum Id {
    /// The service's tool (or tenant, on an admin path).
    Existing,
    /// A tenant's id on a tool path and a tool's on a tenant path.
    OtherKind,
    /// Well-formed, unknown.
    Unknown,
    /// Any text that fits in a path.
    Text(String),
    /// Percent-encoded bytes that are not UTF-8.
    NotUtf8,
    /// Very long.
    Long,
}

fn id() -> impl Strategy<Value = Id> {
    prop_oneof![
        8 => Just(Id::Existing),
        1 => Just(Id::OtherKind),
        2 => Just(Id::Unknown),
        2 => "[a-zA-Z0-9_.~-]{0,40}".prop_map(Id::Text),
        1 => Just(Id::NotUtf8),
        1 => Just(Id::Long),
    ]
}

/// A query value.
#[derive(Debug, Clone)]
enum QueryValue {
    /// Valid per the parameter's schema.
    Valid(Value),
    /// Any text.
    Text(String),
    /// Percent-encoded bytes that are not UTF-8.
    NotUtf8,
}

/// The body of a request.
#[derive(Debug, Clone)]
enum BodyCase {
    /// None at all.
    Empty,
    /// Valid per the documented schema.
    Generated(Value),
    /// The operation's known-good body.
    Exemplar,
    /// A generated body, mutated.
    MutatedGenerated(Value, Mutation, usize),
    /// The known-good body, mutated.
    MutatedExemplar(Mutation, usize),
    /// Any JSON that is not an object.
    NotObject(Value),
    /// Text that is not JSON.
    Text(String),
}

/// One generated request, before the service's ids and keys fill it in.
#[derive(Debug, Clone)]
struct Case {
    op: usize,
    key: Key,
    id: Id,
    query: Vec<(String, QueryValue)>,
    unknown_query: bool,
    body: BodyCase,
    /// Content type of a JSON body: `application/json` unless this says otherwise.
    content_type: Option<&'static str>,
    /// The parts of a multipart body.
    parts: Vec<Part>,
}

/// One part of a multipart upload.
#[derive(Debug, Clone)]
enum Part {
    /// A `file` part with this file name and content.
    File(String, String),
    /// A `spec` part.
    Spec(String),
    /// A part of another name.
    Other,
}

fn part(doc: &Value) -> impl Strategy<Value = Part> + use<> {
    let spec_schema = json!({"$ref": "#/components/schemas/UploadSpec"});
    prop_oneof![
        4 => (
            prop_oneof![Just("add.py".to_owned()), "[a-z./]{0,8}(\\.py)?"],
            prop_oneof![Just(ADD.to_owned()), "[ -~\n]{0,40}"],
        )
            .prop_map(|(name, source)| Part::File(name, source)),
        2 => valid(doc, &spec_schema, 4).prop_map(|v| Part::Spec(v.to_string())),
        1 => "[ -~]{0,20}".prop_map(Part::Spec),
        1 => Just(Part::Other),
    ]
}

fn case(doc: &Value, ops: &[Op], i: usize) -> BoxedStrategy<Case> {
    let op = &ops[i];
    let query: Vec<_> = op
        .query
        .iter()
        .map(|(name, schema)| {
            let name = name.clone();
            let value = prop_oneof![
                4 => valid(doc, schema, 2).prop_map(QueryValue::Valid),
                2 => "[a-zA-Z0-9 %&=+-]{0,12}".prop_map(QueryValue::Text),
                1 => Just(QueryValue::Text("99999999999999999999999".into())),
                1 => Just(QueryValue::Text("-1".into())),
                1 => Just(QueryValue::NotUtf8),
            ];
            proptest::option::weighted(0.6, value.prop_map(move |v| (name.clone(), v)))
        })
        .collect();
    let body: BoxedStrategy<BodyCase> = match &op.body {
        Some((media, schema)) if media == "application/json" => {
            let generated = valid(doc, schema, 5);
            prop_oneof![
                3 => generated.clone().prop_map(BodyCase::Generated),
                3 => Just(BodyCase::Exemplar),
                3 => (generated, mutation(), any::<usize>())
                    .prop_map(|(v, m, at)| BodyCase::MutatedGenerated(v, m, at)),
                4 => (mutation(), any::<usize>()).prop_map(|(m, at)| BodyCase::MutatedExemplar(m, at)),
                1 => proptest::sample::select(vec![json!([]), json!("s"), json!(1), Value::Null, json!([{"source": ADD}])])
                    .prop_map(BodyCase::NotObject),
                1 => "[ -~]{0,20}".prop_map(BodyCase::Text),
                1 => Just(BodyCase::Empty),
            ]
            .boxed()
        }
        _ => prop_oneof![
            8 => Just(BodyCase::Empty),
            1 => Just(BodyCase::Exemplar),
            1 => "[ -~]{0,20}".prop_map(BodyCase::Text),
        ]
        .boxed(),
    };
    let content_type = proptest::option::weighted(
        0.1,
        proptest::sample::select(vec![
            "text/plain",
            "application/json; charset=utf-8",
            "multipart/form-data; boundary=x",
        ]),
    );
    let parts = proptest::collection::vec(part(doc), 0..3);
    (
        key(),
        id(),
        query,
        proptest::bool::weighted(0.1),
        body,
        content_type,
        parts,
    )
        .prop_map(
            move |(key, id, query, unknown_query, body, content_type, parts)| Case {
                op: i,
                key,
                id,
                query: query.into_iter().flatten().collect(),
                unknown_query,
                body,
                content_type,
                parts,
            },
        )
        .boxed()
}

/// The service a case runs against: a tenant with one tool.
struct Fixture {
    service: Service,
    key: String,
    tool: String,
    tenant: String,
}

impl Fixture {
    async fn start() -> Fixture {
        let service = Service::start();
        let key = service.tenant(json!({})).await;
        let tool = service.register(&key, json!({"source": ADD})).await;
        let tenants = service
            .send(Method::GET, "/v1/admin/tenants", Some(OPERATOR_KEY), None)
            .await;
        let tenant = tenants.json["items"][0]["id"].as_str().unwrap().to_owned();
        Fixture {
            service,
            key,
            tool,
            tenant,
        }
    }

    /// A known-good body for `op`.
    fn exemplar(&self, op: &Op) -> Value {
        match (op.method.as_str(), op.path.as_str()) {
            ("POST", "/v1/tools") => json!({"source": ADD, "name": "add_two", "tags": ["math"]}),
            ("POST", "/v1/tools/validate") => json!({"source": ADD}),
            ("PUT", "/v1/tools/{id}") => json!({"source": ADD, "description": "adds"}),
            ("POST", "/v1/tools/{id}/run") => json!({"arguments": {"a": 1, "b": 2}}),
            ("POST", "/v1/runs/batch") => {
                json!({"calls": [{"tool": self.tool, "arguments": {"a": 1, "b": 2}}]})
            }
            ("POST", "/v1/admin/tenants") => {
                json!({"name": "acme", "policy": {"calls_per_minute": 10}})
            }
            ("PUT", "/v1/admin/tenants/{id}/policy") => json!({"calls_per_minute": 10}),
            _ => json!({}),
        }
    }

    fn request(&self, op: &Op, case: &Case) -> Request<Body> {
        let tool_path = op.path.starts_with("/v1/tools/");
        let id = match &case.id {
            Id::Existing if tool_path => self.tool.clone(),
            Id::Existing => self.tenant.clone(),
            Id::OtherKind if tool_path => self.tenant.clone(),
            Id::OtherKind => self.tool.clone(),
            Id::Unknown if tool_path => format!("tool_{}", "0".repeat(32)),
            Id::Unknown => format!("tnt_{}", "0".repeat(32)),
            Id::Text(t) => t.clone(),
            Id::NotUtf8 => "%FF%FE".into(),
            Id::Long => "a".repeat(5000),
        };
        let mut uri = op.path.replace("{id}", &id);
        let mut pairs: Vec<String> = case
            .query
            .iter()
            .map(|(name, v)| {
                let value = match v {
                    QueryValue::Valid(Value::String(s)) => encode(s),
                    QueryValue::Valid(v) => encode(&v.to_string()),
                    QueryValue::Text(t) => encode(t),
                    QueryValue::NotUtf8 => "%FF".into(),
                };
                format!("{name}={value}")
            })
            .collect();
        if case.unknown_query {
            pairs.push("unknown=1".into());
        }
        if !pairs.is_empty() {
            uri = format!("{uri}?{}", pairs.join("&"));
        }
        let mut request = Request::builder().method(op.method.clone()).uri(&uri);
        let operator = op.scheme.as_deref() == Some("operatorKey");
        let (right, other) = if operator {
            (OPERATOR_KEY, self.key.as_str())
        } else {
            (self.key.as_str(), OPERATOR_KEY)
        };
        let authorization = match &case.key {
            Key::Right => Some(format!("Bearer {right}")),
            Key::RightLowerCase => Some(format!("bearer  {right}")),
            Key::Absent => None,
            Key::OtherKind => Some(format!("Bearer {other}")),
            Key::Unknown => Some(format!("Bearer wdn_{}", "0".repeat(64))),
            Key::Garbage(g) => Some(g.clone()),
            Key::Basic => Some("Basic dXNlcjpwYXNz".into()),
        };
        if let Some(a) = authorization {
            request = request.header(header::AUTHORIZATION, a);
        }
        let multipart = op
            .body
            .as_ref()
            .is_some_and(|(media, _)| media == "multipart/form-data");
        if multipart && !matches!(case.body, BodyCase::Text(_)) {
            return request
                .header(
                    header::CONTENT_TYPE,
                    case.content_type
                        .unwrap_or("multipart/form-data; boundary=XyZ"),
                )
                .body(Body::from(multipart_body(&case.parts)))
                .unwrap();
        }
        let text = match &case.body {
            BodyCase::Empty => None,
            BodyCase::Generated(v) => Some(v.to_string()),
            BodyCase::Exemplar => Some(self.exemplar(op).to_string()),
            BodyCase::MutatedGenerated(v, m, at) => Some(mutate(v.clone(), m, *at)),
            BodyCase::MutatedExemplar(m, at) => Some(mutate(self.exemplar(op), m, *at)),
            BodyCase::NotObject(v) => Some(v.to_string()),
            BodyCase::Text(t) => Some(t.clone()),
        };
        match text {
            Some(text) => request
                .header(
                    header::CONTENT_TYPE,
                    case.content_type.unwrap_or("application/json"),
                )
                .body(Body::from(text)),
            None => request.body(Body::empty()),
        }
        .unwrap()
    }
}

fn multipart_body(parts: &[Part]) -> String {
    let mut body = String::new();
    for part in parts {
        body.push_str("--XyZ\r\n");
        match part {
            Part::File(name, source) => body.push_str(&format!(
                "Content-Disposition: form-data; name=\"file\"; filename=\"{name}\"\r\n\r\n{source}\r\n"
            )),
            Part::Spec(spec) => body.push_str(&format!(
                "Content-Disposition: form-data; name=\"spec\"\r\n\r\n{spec}\r\n"
            )),
            Part::Other => {
                body.push_str("Content-Disposition: form-data; name=\"other\"\r\n\r\nx\r\n")
            }
        }
    }
    body.push_str("--XyZ--\r\n");
    body
}

/// Percent-encodes everything but letters, digits and `-_.~`.
fn encode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// Compiled validators of the document's schemas, by their JSON text.
struct Validators {
    doc: Value,
    compiled: HashMap<String, Arc<jsonschema::Validator>>,
}

impl Validators {
    fn check(&mut self, schema: &Value, instance: &Value) -> Result<(), String> {
        let key = schema.to_string();
        let validator = match self.compiled.get(&key) {
            Some(v) => Arc::clone(v),
            None => {
                // The schema may `$ref` the document's components: compile it with them.
                let mut root = json!({ "allOf": [schema], "components": self.doc["components"] });
                root["$schema"] = json!("https://json-schema.org/draft/2020-12/schema");
                let v = Arc::new(jsonschema::validator_for(&root).map_err(|e| e.to_string())?);
                self.compiled.insert(key, Arc::clone(&v));
                v
            }
        };
        let errors: Vec<String> = validator
            .iter_errors(instance)
            .map(|e| format!("{} at {}", e, e.instance_path()))
            .collect();
        if errors.is_empty() {
            Ok(())
        } else {
            Err(errors.join("; "))
        }
    }
}

/// What the document says of `reply` to `op`, or why it is wrong.
fn conforms(validators: &mut Validators, op: &Op, reply: &Reply) -> Result<(), String> {
    let status = reply.status.as_u16();
    if reply.status.is_server_error() {
        return Err(format!("server error {status}: {}", reply.json));
    }
    let Some(answer) = op.responses.get(&status.to_string()) else {
        return Err(format!(
            "undocumented status {status} (documented: {:?}): {}",
            op.responses.keys().collect::<Vec<_>>(),
            reply.json
        ));
    };
    if reply.status == StatusCode::TOO_MANY_REQUESTS
        && !reply.headers.contains_key(header::RETRY_AFTER)
    {
        return Err("429 without Retry-After".into());
    }
    if let Some(schema) = answer["content"]["application/json"]["schema"].as_object() {
        validators
            .check(&Value::Object(schema.clone()), &reply.json)
            .map_err(|e| {
                format!(
                    "{status} body does not match its schema: {e}: {}",
                    reply.json
                )
            })?;
    }
    Ok(())
}

#[test]
fn every_operation_answers_as_documented() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let doc = warden::http::openapi::document();
    let ops = operations(&doc);
    assert!(ops.len() >= 20, "{} operations", ops.len());
    let cases: u32 = std::env::var("WARDEN_API_CASES")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(128);
    let strategy = {
        let (doc, ops) = (doc.clone(), ops.clone());
        (0..ops.len()).prop_flat_map(move |i| case(&doc, &ops, i))
    };
    let validators = std::cell::RefCell::new(Validators {
        doc: doc.clone(),
        compiled: HashMap::new(),
    });
    let mut runner = TestRunner::new(Config {
        cases,
        failure_persistence: None,
        ..Config::default()
    });
    let result = runner.run(&strategy, |case| {
        let op = &ops[case.op];
        let reply = rt.block_on(async {
            let fixture = Fixture::start().await;
            let request = fixture.request(op, &case);
            fixture.service.raw(request).await
        });
        if std::env::var_os("WARDEN_API_STATS").is_some() {
            eprintln!(
                "STAT {} {} {} {}",
                op.method,
                op.path,
                reply.status.as_u16(),
                reply.json["error"]["code"]
            );
        }
        conforms(&mut validators.borrow_mut(), op, &reply)
            .map_err(|e| TestCaseError::fail(format!("{} {}: {e}", op.method, op.path)))
    });
    if let Err(e) = result {
        panic!("{e}");
    }
}

/// The types whose serde form is written by hand match the schemas that describe them.
#[test]
fn hand_serialized_types_match_their_schemas() {
    use warden::limits::{ByteSize, FileCount, Limits};
    use warden::tenant::{AllowedFolder, TenantPolicy};

    let doc = warden::http::openapi::document();
    let mut validators = Validators {
        doc: doc.clone(),
        compiled: HashMap::new(),
    };
    let schema = |name: &str| json!({ "$ref": format!("#/components/schemas/{name}") });
    let raised = Limits {
        open_files: FileCount(3),
        disk_write: ByteSize::b(7),
        files_created: FileCount(5),
        ..Limits::default()
    };
    for limits in [Limits::default(), raised] {
        let json = serde_json::to_value(limits).unwrap();
        validators.check(&schema("Limits"), &json).unwrap();
        // Every field the schema names is one the type writes, and the reverse.
        let documented: Vec<&String> = doc["components"]["schemas"]["Limits"]["properties"]
            .as_object()
            .unwrap()
            .keys()
            .collect();
        for field in json.as_object().unwrap().keys() {
            assert!(documented.contains(&field), "{field} is not documented");
        }
    }
    let policy = TenantPolicy {
        allowed_folders: vec![
            AllowedFolder::read_write("/srv/rw"),
            AllowedFolder::read_only("/srv/ro"),
        ],
        ..TenantPolicy::default()
    };
    let json = serde_json::to_value(&policy).unwrap();
    validators.check(&schema("TenantPolicy"), &json).unwrap();
    // A mistyped folder is refused by the schema as by the type.
    let mut bad = json.clone();
    bad["allowed_folders"][1]["mode"] = json!("rx");
    assert!(validators.check(&schema("TenantPolicy"), &bad).is_err());
    assert!(serde_json::from_value::<TenantPolicy>(bad).is_err());
}
