//! Requests the service cannot read: each is answered with the JSON error shape and a
//! stable code, never a plain-text rejection, and nothing is stored.

use axum::body::Body;
use axum::http::{Method, Request, StatusCode, header};
use serde_json::json;

use super::{ADD, Reply, Service};

fn request(
    method: Method,
    path: &str,
    key: &str,
    content_type: &str,
    body: String,
) -> Request<Body> {
    Request::builder()
        .method(method)
        .uri(path)
        .header(header::AUTHORIZATION, format!("Bearer {key}"))
        .header(header::CONTENT_TYPE, content_type)
        .body(Body::from(body))
        .unwrap()
}

/// Asserts that `r` is the JSON error `(status, code)`.
fn assert_error(r: &Reply, status: StatusCode, code: &str) {
    assert_eq!((r.status, r.code()), (status, code), "{}", r.json);
    assert_eq!(
        r.headers[header::CONTENT_TYPE],
        "application/json",
        "{}",
        r.json
    );
    assert!(
        !r.json["error"]["message"].as_str().unwrap().is_empty(),
        "{}",
        r.json
    );
}

fn multipart(boundary: &str, parts: &[(&str, Option<&str>, &str)]) -> String {
    let mut body = String::new();
    for (name, file_name, content) in parts {
        let file = file_name.map_or(String::new(), |f| format!("; filename=\"{f}\""));
        body.push_str(&format!(
            "--{boundary}\r\nContent-Disposition: form-data; name=\"{name}\"{file}\r\n\r\n{content}\r\n"
        ));
    }
    body.push_str(&format!("--{boundary}--\r\n"));
    body
}

#[tokio::test]
async fn every_kind_of_unreadable_request_is_a_json_error() {
    let s = Service::start();
    let key = s.tenant(json!({})).await;
    let json_type = "application/json";

    let bad_json = s
        .raw(request(
            Method::POST,
            "/v1/tools",
            &key,
            json_type,
            "{\"source\": ".into(),
        ))
        .await;
    assert_error(&bad_json, StatusCode::BAD_REQUEST, "malformed_body");

    let body = json!({"source": ADD}).to_string();
    let wrong_type = s
        .raw(request(Method::POST, "/v1/tools", &key, "text/plain", body))
        .await;
    assert_error(&wrong_type, StatusCode::UNSUPPORTED_MEDIA_TYPE, "not_json");

    let bad_path = s
        .send(Method::GET, "/v1/tools/%FF%FE", Some(&key), None)
        .await;
    assert_error(&bad_path, StatusCode::BAD_REQUEST, "invalid_path");

    let bad_query = s
        .send(Method::GET, "/v1/audit?limit=many", Some(&key), None)
        .await;
    assert_error(&bad_query, StatusCode::BAD_REQUEST, "invalid_query");
    let unknown_query = s
        .send(Method::GET, "/v1/tools?colour=red", Some(&key), None)
        .await;
    assert_error(&unknown_query, StatusCode::BAD_REQUEST, "invalid_query");

    let not_multipart = s
        .raw(request(
            Method::POST,
            "/v1/tools/upload",
            &key,
            json_type,
            json!({"source": ADD}).to_string(),
        ))
        .await;
    assert_error(&not_multipart, StatusCode::BAD_REQUEST, "invalid_upload");
    let truncated = s
        .raw(request(
            Method::POST,
            "/v1/tools/upload",
            &key,
            "multipart/form-data; boundary=XwardenX",
            "--XwardenX\r\nContent-Disposition: form-data; name=\"file\"; filename=\"add.py\"\r\n\r\ndef".into(),
        ))
        .await;
    assert_error(&truncated, StatusCode::BAD_REQUEST, "invalid_upload");

    let id = s.register(&key, json!({"source": ADD})).await;
    let huge = json!({"arguments": {"a": "x".repeat(2 * 1024 * 1024), "b": 1}}).to_string();
    let too_large = s
        .raw(request(
            Method::POST,
            &format!("/v1/tools/{id}/run"),
            &key,
            json_type,
            huge,
        ))
        .await;
    assert_error(&too_large, StatusCode::PAYLOAD_TOO_LARGE, "body_too_large");
}

#[tokio::test]
async fn a_tool_spec_that_is_not_a_json_object_is_422_and_stores_nothing() {
    let s = Service::start();
    let key = s.tenant(json!({})).await;
    let id = s.register(&key, json!({"source": ADD})).await;
    // serde would read `["def ..."]` as a ToolSpec, field by field.
    for spec in [json!([ADD]), json!([]), json!(ADD), json!(null), json!(1)] {
        for (method, path) in [
            (Method::POST, "/v1/tools".to_owned()),
            (Method::POST, "/v1/tools/validate".to_owned()),
            (Method::PUT, format!("/v1/tools/{id}")),
        ] {
            let r = s
                .send(method.clone(), &path, Some(&key), Some(spec.clone()))
                .await;
            assert_error(&r, StatusCode::UNPROCESSABLE_ENTITY, "invalid_body");
            assert!(
                r.json["error"]["message"]
                    .as_str()
                    .unwrap()
                    .contains("expected a JSON object"),
                "{method} {path}: {}",
                r.json
            );
        }
        let form = multipart(
            "XwardenX",
            &[
                ("file", Some("mul.py"), &ADD.replace("add", "mul")),
                ("spec", None, &spec.to_string()),
            ],
        );
        let r = s
            .raw(request(
                Method::POST,
                "/v1/tools/upload",
                &key,
                "multipart/form-data; boundary=XwardenX",
                form,
            ))
            .await;
        assert_error(&r, StatusCode::UNPROCESSABLE_ENTITY, "invalid_body");
    }
    let versions = s
        .send(
            Method::GET,
            &format!("/v1/tools/{id}/versions"),
            Some(&key),
            None,
        )
        .await;
    assert_eq!(versions.json["items"].as_array().unwrap().len(), 1);
    let tools = s.send(Method::GET, "/v1/tools", Some(&key), None).await;
    assert_eq!(tools.json["items"].as_array().map(Vec::len), Some(1));
}
