//! Extractors whose rejections are [`ApiError`]s, so that a malformed body, path, query
//! or upload is answered in the same JSON shape as every other error, never with
//! axum's plain-text rejections.
//!
//! Every JSON body and the upload's `spec` part must be a JSON *object*: serde's
//! derived `Deserialize` would otherwise read a struct from an array, field by field,
//! and `["def f(): ..."]` would register a tool.

use std::fmt;
use std::marker::PhantomData;

use axum::Json;
use axum::extract::multipart::MultipartRejection;
use axum::extract::rejection::PathRejection;
use axum::extract::{FromRequest, FromRequestParts, Multipart, Path, Query, Request};
use axum::http::request::Parts;
use serde::de::{DeserializeOwned, MapAccess, Visitor, value::MapAccessDeserializer};
use serde::{Deserialize, Deserializer};

use super::ApiError;

/// A JSON object body (`Content-Type: application/json`) read as `T`.
#[derive(Debug, Clone)]
pub(super) struct JsonBody<T>(pub T);

impl<S, T> FromRequest<S> for JsonBody<T>
where
    T: DeserializeOwned,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request(request: Request, state: &S) -> Result<Self, ApiError> {
        let Json(Object(value)) = Json::<Object<T>>::from_request(request, state).await?;
        Ok(JsonBody(value))
    }
}

/// A path parameter read as `T`.
#[derive(Debug, Clone)]
pub(super) struct PathParam<T>(pub T);

impl<S, T> FromRequestParts<S> for PathParam<T>
where
    T: DeserializeOwned + Send,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        let Path(value) = Path::<T>::from_request_parts(parts, state).await?;
        Ok(PathParam(value))
    }
}

/// The query string read as `T`.
#[derive(Debug, Clone)]
pub(super) struct QueryParams<T>(pub T);

impl<S, T> FromRequestParts<S> for QueryParams<T>
where
    T: DeserializeOwned,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        let Query(value) = Query::<T>::from_request_parts(parts, state).await?;
        Ok(QueryParams(value))
    }
}

/// A `multipart/form-data` body.
pub(super) struct Upload(pub Multipart);

impl<S> FromRequest<S> for Upload
where
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request(request: Request, state: &S) -> Result<Self, ApiError> {
        Ok(Upload(Multipart::from_request(request, state).await?))
    }
}

impl From<PathRejection> for ApiError {
    fn from(r: PathRejection) -> Self {
        ApiError::Path(r.body_text())
    }
}

impl From<MultipartRejection> for ApiError {
    fn from(r: MultipartRejection) -> Self {
        ApiError::Upload(format!(
            "{}: send multipart/form-data with a boundary",
            r.body_text()
        ))
    }
}

/// `T`, read only from a JSON object.
#[derive(Debug, Clone)]
pub(super) struct Object<T>(pub T);

impl<'de, T: Deserialize<'de>> Deserialize<'de> for Object<T> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct ObjectVisitor<T>(PhantomData<T>);

        impl<'de, T: Deserialize<'de>> Visitor<'de> for ObjectVisitor<T> {
            type Value = Object<T>;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a JSON object {...}")
            }

            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Object<T>, A::Error> {
                T::deserialize(MapAccessDeserializer::new(map)).map(Object)
            }
        }

        deserializer.deserialize_map(ObjectVisitor(PhantomData))
    }
}
