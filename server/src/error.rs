//! Errors in OpenAI's shape: `{"error": {"message", "type", "param", "code"}}` with the HTTP
//! status the official clients map to their exception classes.

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::json;

#[derive(Debug, Clone, PartialEq)]
pub struct ApiError {
    pub status: u16,
    /// OpenAI's `type`: "invalid_request_error", "authentication_error", "server_error".
    pub kind: &'static str,
    pub code: Option<&'static str>,
    pub param: Option<String>,
    pub message: String,
}

impl ApiError {
    fn new(status: u16, kind: &'static str, code: Option<&'static str>, message: String) -> Self {
        ApiError {
            status,
            kind,
            code,
            param: None,
            message,
        }
    }

    pub fn invalid_request(message: impl Into<String>) -> Self {
        Self::new(400, "invalid_request_error", None, message.into())
    }

    pub fn with_param(mut self, param: &str) -> Self {
        self.param = Some(param.to_string());
        self
    }

    pub fn context_length_exceeded(prompt_tokens: usize, n_ctx: usize) -> Self {
        Self::new(
            400,
            "invalid_request_error",
            Some("context_length_exceeded"),
            format!(
                "the prompt is {prompt_tokens} tokens long but the context holds {n_ctx} \
                 (and needs room for the answer): shorten the prompt or restart the server \
                 with a larger -c"
            ),
        )
    }

    pub fn input_too_long(index: usize, tokens: usize, n_ctx: usize) -> Self {
        Self::new(
            400,
            "invalid_request_error",
            Some("context_length_exceeded"),
            format!(
                "input {index} is {tokens} tokens long but the context holds {n_ctx}: shorten \
                 or split it, or restart the server with a larger -c"
            ),
        )
        .with_param("input")
    }

    pub fn unauthorized() -> Self {
        Self::new(
            401,
            "authentication_error",
            Some("invalid_api_key"),
            "missing or wrong API key: send 'Authorization: Bearer <key>' with the key given \
             to 'smolrun serve --api-key'"
                .into(),
        )
    }

    pub fn not_found(path: &str) -> Self {
        Self::new(
            404,
            "invalid_request_error",
            Some("not_found"),
            format!("no such endpoint: {path}"),
        )
    }

    /// A request named a model the server does not have (`--models-dir`).
    pub fn model_not_found(message: String) -> Self {
        Self::new(
            404,
            "invalid_request_error",
            Some("model_not_found"),
            message,
        )
    }

    pub fn method_not_allowed() -> Self {
        Self::new(
            405,
            "invalid_request_error",
            Some("method_not_allowed"),
            "this endpoint does not take that method".into(),
        )
    }

    pub fn body_too_large(limit: usize) -> Self {
        Self::new(
            413,
            "invalid_request_error",
            Some("request_too_large"),
            format!("the request body is larger than {} KB", limit / 1024),
        )
    }

    pub fn queue_full(capacity: usize) -> Self {
        Self::new(
            503,
            "server_error",
            Some("queue_full"),
            format!(
                "the server is busy: one request is generating and {capacity} are waiting; \
                 retry in a moment"
            ),
        )
    }

    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(500, "server_error", None, message.into())
    }

    pub fn to_json(&self) -> serde_json::Value {
        json!({"error": {
            "message": self.message,
            "type": self.kind,
            "param": self.param,
            "code": self.code,
        }})
    }
}

impl ApiError {
    /// The same error in Ollama's shape, `{"error": "message"}`, which its clients raise as
    /// `ResponseError(message)`.
    pub fn into_ollama_response(self) -> Response {
        let status = StatusCode::from_u16(self.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        let mut response = (
            status,
            [(header::CONTENT_TYPE, "application/json")],
            json!({"error": self.message}).to_string(),
        )
            .into_response();
        if self.status == 503 {
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
        }
        response
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let status = StatusCode::from_u16(self.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        let mut response = (
            status,
            [(header::CONTENT_TYPE, "application/json")],
            self.to_json().to_string(),
        )
            .into_response();
        if self.status == 503 {
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
        }
        response
    }
}
