//! The RabbitMQ (AMQP 0-9-1) sink: publishes each event with publisher confirms.
//!
//! `--sink 'amqp://user:pass@host:5672/%2f?exchange=outbox&routing_key={event_type}'` (defaults:
//! the default exchange `""` and routing key `outbox`, i.e. a queue named `outbox`). Messages are
//! persistent, `content_type` application/json, `message_id` the idempotency key (consumers
//! dedupe on it; RabbitMQ keeps no dedup state), `type` the event type, the row's headers as AMQP
//! headers (never `x-*`, `CC`/`BCC` or a relay-set property name: see [`HeaderPolicy::amqp`]).
//! Published as `mandatory`: a message no queue receives is not a silent loss. A nack (a queue
//! at `x-max-length` with `overflow=reject-publish`, a node that cannot take responsibility for
//! the message) and an unroutable message are the broker's state or its routing, not the
//! event's fault: [`SinkError::Backpressure`], never counted (an outage when the whole batch gets
//! them; deferred beside messages the broker took). The connection is made on the first publish
//! and again after it breaks.
//!
//! With `--format cloudevents` the body is the payload and the attributes travel as
//! `cloudEvents_*` headers ([`Binding::Amqp`], binary mode; RabbitMQ hands a 0-9-1 message's
//! headers to an AMQP 1.0 consumer as its application properties), as AMQP strings: `time` too,
//! since a 0-9-1 timestamp holds whole seconds. `content_type` is `datacontenttype`.

use lapin::options::{BasicPublishOptions, ConfirmSelectOptions};
use lapin::types::{AMQPValue, FieldTable, LongString, ShortString};
use lapin::{BasicProperties, Channel, Connection, ConnectionProperties};
use tokio::sync::Mutex;

use super::cloudevents::{Binding, CloudEvents};
use super::headers::{self, HeaderPolicy};
use super::template::Template;
use super::{publish_each, write_envelope, Event, Outcome, PublishCtl, Sink, SinkError};

pub struct AmqpSink {
    uri: String,
    exchange: ShortString,
    routing_key: Template,
    display: String,
    channel: Mutex<Link>,
    row_headers: HeaderPolicy,
    /// `--format cloudevents`; `None`: the document.
    cloudevents: Option<CloudEvents>,
}

/// The sink's connection: open, or being opened in the background.
#[derive(Default)]
struct Link {
    open: Option<(Connection, Channel)>,
    /// A connection attempt that outlives the publish that started it: over a slow link the
    /// handshake (AMQP header, start, tune, open, a channel, confirms: five round trips) can take
    /// longer than one `--publish-timeout`, and an attempt dropped at each publish's timeout and
    /// begun again at the next would never finish (seen: nothing published in 40 s through 500 ms
    /// of latency with a 2 s timeout). The next publish waits on the same attempt.
    connecting: Option<tokio::task::JoinHandle<Result<(Connection, Channel), SinkError>>>,
}

/// How long one connection attempt may take in the background, across publishes.
const CONNECT_BOUND: std::time::Duration = std::time::Duration::from_secs(60);

/// Connects to `uri` and opens a channel with publisher confirms.
async fn connect(uri: &str) -> Result<(Connection, Channel), SinkError> {
    let conn = Connection::connect(uri, ConnectionProperties::default())
        .await
        .map_err(|e| SinkError::unavailable(format!("RabbitMQ: cannot connect: {e}")))?;
    let ch = conn
        .create_channel()
        .await
        .map_err(|e| SinkError::unavailable(format!("RabbitMQ: cannot open a channel: {e}")))?;
    ch.confirm_select(ConfirmSelectOptions::default())
        .await
        .map_err(|e| SinkError::unavailable(format!("RabbitMQ: cannot enable confirms: {e}")))?;
    Ok((conn, ch))
}

impl AmqpSink {
    pub fn new(spec: &str) -> Result<Self, super::Error> {
        let mut url = url::Url::parse(spec)
            .map_err(|e| super::Error::invalid(format!("invalid --sink `amqp://…`: {e}")))?;
        let mut exchange = String::new();
        let mut routing_key = "outbox".to_owned();
        for (k, v) in url.query_pairs() {
            match k.as_ref() {
                "exchange" => exchange = v.into_owned(),
                "routing_key" if !v.is_empty() => routing_key = v.into_owned(),
                other => {
                    return Err(super::Error::invalid(format!(
                        "invalid --sink: unknown amqp parameter `{other}` (use exchange=NAME, routing_key=TEMPLATE)"
                    )))
                }
            }
        }
        url.set_query(None);
        let uri = url.to_string();
        if url.password().is_some() {
            let _ = url.set_password(Some("***"));
        }
        let display = format!("{url}?exchange={exchange}&routing_key={routing_key}");
        let routing_key = Template::parse(
            &routing_key,
            &format!("invalid --sink: routing_key `{routing_key}`"),
        )
        .map_err(super::Error::invalid)?;
        let exchange = ShortString::try_new(exchange).map_err(|_| {
            super::Error::invalid("invalid --sink: an exchange name is at most 255 bytes")
        })?;
        Ok(Self {
            uri,
            exchange,
            routing_key,
            display,
            channel: Mutex::new(Link::default()),
            row_headers: HeaderPolicy::amqp(),
            cloudevents: None,
        })
    }

    /// Sends CloudEvents (binary mode) instead of the document.
    pub fn with_cloudevents(mut self, ce: Option<CloudEvents>) -> Self {
        self.row_headers = HeaderPolicy::amqp().for_cloudevents(ce.as_ref().map(|_| Binding::Amqp));
        self.cloudevents = ce;
        self
    }

    /// The open channel, connecting (with publisher confirms) when there is none or it broke.
    /// Cancel-safe: a caller that gives up (its publish timed out) leaves the attempt running
    /// for the next one ([`Link::connecting`]).
    async fn channel(&self) -> Result<Channel, SinkError> {
        let mut link = self.channel.lock().await;
        if let Some((conn, ch)) = link.open.as_ref() {
            if conn.status().connected() && ch.status().connected() {
                return Ok(ch.clone());
            }
        }
        link.open = None;
        let attempt = link.connecting.get_or_insert_with(|| {
            let uri = self.uri.clone();
            tokio::spawn(async move {
                tokio::time::timeout(CONNECT_BOUND, connect(&uri))
                    .await
                    .unwrap_or_else(|_| {
                        Err(SinkError::unavailable(format!(
                            "RabbitMQ: not connected within {}",
                            humantime::format_duration(CONNECT_BOUND)
                        )))
                    })
            })
        });
        let result = attempt.await;
        link.connecting = None;
        let (conn, ch) = result.map_err(|e| {
            SinkError::unavailable(format!("RabbitMQ: the connection attempt failed: {e}"))
        })??;
        link.open = Some((conn, ch.clone()));
        Ok(ch)
    }

    async fn publish_one(&self, ch: &Channel, e: &Event) -> Result<(), SinkError> {
        let mut body = Vec::with_capacity(256 + e.payload.len());
        let mut headers = FieldTable::default();
        let attributes = match &self.cloudevents {
            None => {
                write_envelope(e, &mut body);
                Vec::new()
            }
            Some(ce) => {
                ce.write_body(e, &mut body);
                ce.headers(Binding::Amqp, e)
            }
        };
        // The policy has bounded the names to a short string's 255 bytes; the attributes' are short.
        for (k, v) in attributes
            .into_iter()
            .chain(headers::row_headers(e, &self.row_headers))
        {
            if let Ok(name) = ShortString::try_new(k) {
                headers.insert(name, AMQPValue::LongString(LongString::from(v)));
            }
        }
        let message_id = ShortString::try_new(e.idempotency_key.as_str()).map_err(|_| {
            SinkError::Permanent(
                "the idempotency key is longer than 255 bytes: not a valid RabbitMQ message_id"
                    .into(),
            )
        })?;
        let routing_key = self.routing_key.expand(e);
        let routing = ShortString::try_new(routing_key.as_str()).map_err(|_| {
            SinkError::Permanent(format!(
                "the routing key is longer than 255 bytes ({} bytes)",
                routing_key.len()
            ))
        })?;
        let mut props = BasicProperties::default()
            .with_message_id(message_id)
            .with_content_type(ShortString::from("application/json"))
            .with_app_id(ShortString::from("outboxctl"))
            .with_delivery_mode(2)
            .with_headers(headers);
        // `type` is a convenience copy of the document's `type`: omitted when too long.
        if let Ok(kind) = ShortString::try_new(e.event_type.as_str()) {
            props = props.with_type(kind);
        }
        let confirm = ch
            .basic_publish(
                self.exchange.clone(),
                routing,
                BasicPublishOptions {
                    mandatory: true,
                    ..Default::default()
                },
                &body,
                props,
            )
            .await
            .map_err(|err| SinkError::unavailable(format!("RabbitMQ: {err}")))?
            .await
            .map_err(|err| SinkError::unavailable(format!("RabbitMQ: {err}")))?;
        // See the module doc: never the event's fault, so never counted.
        if confirm.is_nack() {
            return Err(SinkError::backpressure(format!(
                "RabbitMQ: the broker nacked the message for routing key `{routing_key}`: a queue at its x-max-length with overflow=reject-publish, or a node that cannot take it"
            )));
        }
        if confirm.take_message().is_some() {
            return Err(SinkError::backpressure(format!(
                "RabbitMQ: no queue is bound for routing key `{routing_key}` on exchange `{}`",
                self.exchange.as_str()
            )));
        }
        Ok(())
    }
}

#[async_trait::async_trait]
impl Sink for AmqpSink {
    async fn publish(&self, events: &[Event], ctl: &PublishCtl) -> Vec<Outcome> {
        let ch = match tokio::time::timeout(ctl.timeout, self.channel()).await {
            Ok(Ok(ch)) => ch,
            Ok(Err(e)) => return vec![Outcome::Failed(e); events.len()],
            Err(_) => {
                return vec![
                    Outcome::Failed(SinkError::unavailable(
                        "RabbitMQ: not connected within --publish-timeout (still connecting)"
                    ));
                    events.len()
                ]
            }
        };
        publish_each(events, ctl, |e| {
            let ch = ch.clone();
            async move { self.publish_one(&ch, e).await }
        })
        .await
    }

    fn describe(&self) -> String {
        self.display.clone()
    }
}
