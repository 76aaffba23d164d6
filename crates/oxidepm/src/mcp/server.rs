//! The protocol side: capabilities, `tools/list`, `tools/call` (queued
//! beyond the concurrent-call bound, each result cut to the result bound),
//! `resources/list` and `resources/read`, over the bounded stdio
//! transport. A daemon error is a tool error (`isError: true`) carrying
//! the daemon's code and text, never a protocol error.

use super::bounds::Bounds;
use super::daemon::{Daemon, Failure};
use super::{resources, subscribe, tools, transport, wait};
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, Implementation,
    ListResourcesResult, ListToolsResult, PaginatedRequestParams, ReadResourceRequestParams,
    ReadResourceResponse, ReadResourceResult, ServerCapabilities, ServerConfig,
    SubscribeRequestParams, UnsubscribeRequestParams,
};
use rmcp::service::{RequestContext, RoleServer};
use rmcp::{ErrorData, ServerHandler, ServiceExt};
use serde_json::{json, Value};
use std::sync::Arc;
use tokio::sync::Semaphore;

/// What the server tells a client about itself at initialize.
const INSTRUCTIONS: &str = "oxidepm supervises this host's apps. You act as the actor the daemon \
decided from your connection (call `whoami`): by default class ai, with the ai tier's rights. A \
refusal (E_POLICY_DENIED, E_PROTECTED) is a decision, not a fault: repeat its text to the user \
rather than retrying. Every call is audited with your actor and the tool.";

/// One MCP session's server.
#[derive(Clone)]
pub struct Server {
    daemon: Arc<Daemon>,
    bounds: Bounds,
    calls: Arc<Semaphore>,
    subscriptions: subscribe::Subscriptions,
}

/// Serves one client on stdin and stdout until it closes them.
pub async fn serve(daemon: Daemon, bounds: Bounds) -> Result<(), String> {
    let server = Server {
        daemon: Arc::new(daemon),
        bounds,
        calls: Arc::new(Semaphore::new(bounds.calls)),
        subscriptions: subscribe::Subscriptions::default(),
    };
    let io = transport::Bounded::new(tokio::io::stdin(), tokio::io::stdout());
    let running = server
        .serve(io)
        .await
        .map_err(|e| format!("the client's initialize failed: {e}"))?;
    running
        .waiting()
        .await
        .map_err(|e| format!("the session ended badly: {e}"))?;
    Ok(())
}

impl Server {
    /// The result of one tool call, within the result bound. The text is
    /// the structured result serialized, as the protocol asks for clients
    /// that read only text: it is made once and measured for the bound.
    fn result(&self, tool: &str, outcome: Result<Value, Failure>) -> CallToolResult {
        let outcome = outcome.and_then(|v| {
            let text = v.to_string();
            if text.len() > self.bounds.result_bytes {
                return Err(Failure {
                    code: "E_TOO_LARGE".into(),
                    message: format!(
                        "`{tool}`'s result is {} bytes, over this server's bound of {} bytes: \
                         ask for less (one app, fewer lines, a narrower time window)",
                        text.len(),
                        self.bounds.result_bytes
                    ),
                });
            }
            Ok((v, text))
        });
        match outcome {
            Ok((v, text)) => {
                let mut r = CallToolResult::structured(Value::Null);
                r.structured_content = Some(v);
                r.content = vec![ContentBlock::text(text)];
                r
            }
            Err(f) => {
                let mut r = CallToolResult::structured_error(f.to_json());
                r.content = vec![ContentBlock::text(format!("{}: {}", f.code, f.message))];
                r
            }
        }
    }
}

/// A failure of a resource read, as the protocol's error.
fn resource_error(f: Failure) -> ErrorData {
    let data = Some(json!({ "code": f.code }));
    match f.code.as_str() {
        "E_NOT_FOUND" => ErrorData::resource_not_found(f.message, data),
        "E_BAD_REQUEST" => ErrorData::invalid_params(f.message, data),
        _ => ErrorData::internal_error(format!("{}: {}", f.code, f.message), data),
    }
}

impl ServerHandler for Server {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(
            ServerCapabilities::builder()
                .enable_tools()
                .enable_resources()
                .enable_resources_subscribe()
                .build(),
        )
        .with_server_info(Implementation::new("oxidepm", env!("CARGO_PKG_VERSION")))
        .with_instructions(INSTRUCTIONS)
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        Ok(ListToolsResult::with_all_items(tools::list()))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let name = request.name.to_string();
        let args = Value::Object(request.arguments.unwrap_or_default());
        // Past the bound a call waits here for a turn; a cancelled call
        // stops waiting.
        let permit = tokio::select! {
            p = self.calls.clone().acquire_owned() => p.ok(),
            _ = context.ct.cancelled() => None,
        };
        let Some(_permit) = permit else {
            let f = Failure {
                code: "E_CANCELLED".into(),
                message: "cancelled before it ran".into(),
            };
            return Ok(self.result(&name, Err(f)).into());
        };
        let outcome = if name == "wait" {
            let progress = context
                .meta
                .get_progress_token()
                .map(|t| (context.peer.clone(), t));
            wait::run(
                self.daemon.clone(),
                self.bounds,
                args,
                context.ct.clone(),
                progress,
            )
            .await
        } else {
            let (bounds, tool) = (self.bounds, name.clone());
            let call = self
                .daemon
                .leased(move |d| tools::call(d, bounds, &tool, args));
            tokio::select! {
                r = call => r,
                _ = context.ct.cancelled() => Err(Failure {
                    code: "E_CANCELLED".into(),
                    message: "cancelled by the client; a request already sent to the daemon may still take effect: check with `status`".into(),
                }),
            }
        };
        Ok(self.result(&name, outcome).into())
    }

    async fn list_resources(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, ErrorData> {
        let list = self
            .daemon
            .leased(resources::list)
            .await
            .map_err(resource_error)?;
        Ok(ListResourcesResult::with_all_items(list))
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, ErrorData> {
        let (bounds, uri) = (self.bounds, request.uri.clone());
        let contents = self
            .daemon
            .leased(move |d| resources::read(d, bounds, &uri))
            .await
            .map_err(resource_error)?;
        Ok(ReadResourceResult::new(vec![contents]).into())
    }

    // resources/subscribe is what the clients of the 2025 revisions (the
    // ones that negotiate with initialize) send.
    #[allow(deprecated)]
    async fn subscribe(
        &self,
        request: SubscribeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        let (subs, daemon, peer) = (
            self.subscriptions.clone(),
            self.daemon.clone(),
            context.peer.clone(),
        );
        let leases = daemon
            .stream_leases(subscribe::streams(&request.uri))
            .await
            .map_err(|f| ErrorData::invalid_params(format!("{}: {}", f.code, f.message), None))?;
        tokio::task::spawn_blocking(move || subs.add(daemon, peer, &request.uri, leases))
            .await
            .unwrap_or_else(|e| {
                Err(format!(
                    "the subscription failed inside the MCP server: {e}"
                ))
            })
            .map_err(|m| ErrorData::invalid_params(m, None))
    }

    #[allow(deprecated)]
    async fn unsubscribe(
        &self,
        request: UnsubscribeRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        self.subscriptions.remove(&request.uri);
        Ok(())
    }
}
