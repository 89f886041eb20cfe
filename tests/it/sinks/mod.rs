//! Each sink against its real peer (HTTP, Kafka, NATS, RabbitMQ, Redis, stdout and files), row
//! headers, templates, credentials that never show, and brokers that refuse.

mod amqp;
mod cloudevents;
mod http;
mod kafka;
mod local;
mod nats;
mod redis;
mod refusals;
mod row_headers;
mod secrets;
mod templates;
