//! The Kafka sink's unit tests: spec parsing, properties, how delivery reports are classified
//! and when a producer is replaced. No broker is contacted (the tests against Tansu are in
//! tests/it/sinks/).

use super::*;

#[test]
fn specs_parse_with_debezium_defaults_and_refuse_what_would_be_wrong() {
    let s = parse_spec("kafka://127.0.0.1:9092,k2:9093").unwrap();
    assert_eq!(s.bootstrap, vec!["127.0.0.1:9092", "k2:9093"]);
    assert_eq!(
        (s.topic.as_str(), s.key.as_deref()),
        (DEFAULT_TOPIC, Some(DEFAULT_KEY))
    );
    let s = parse_spec("kafka://k:9092?topic=t.{event_type}&key=&compression=lz4").unwrap();
    assert_eq!(
        (s.topic.as_str(), s.key, s.compression.as_deref()),
        ("t.{event_type}", None, Some("lz4"))
    );
    for bad in [
        "kafka://",
        "kafka://host",
        "kafka://:9092",
        "kafka://h:0",
        "kafka://h:9092,",
        "kafka://u:p@h:9092",
        "kafka://h:9092?topics=x",
        "kafka://h:9092?compression=brotli",
    ] {
        assert!(parse_spec(bad).is_err(), "{bad}");
    }
    assert!(parse_spec("kafka://u:secret@h:9092")
        .unwrap_err()
        .contains("--kafka-property"));
}

#[test]
fn topic_names_follow_kafka_rules() {
    assert_eq!(invalid_topic("outbox.event.order_v2-x"), None);
    for bad in ["", ".", "..", "a b", "a/b", "ä", &"t".repeat(250)] {
        assert!(invalid_topic(bad).is_some(), "{bad}");
    }
}

#[test]
fn properties_split_on_the_first_equals_and_managed_ones_are_refused() {
    let p = parse_properties(&["sasl.password=a=b".into(), "".into()]).unwrap();
    assert_eq!(p, vec![("sasl.password".into(), "a=b".into())]);
    let e = parse_properties(&["enable.idempotence=false".into()]).unwrap_err();
    assert!(e.contains("enable.idempotence"), "{e}");
    let e = parse_properties(&["sasl.password".into()]).unwrap_err();
    assert!(e.contains("KEY=VALUE"), "{e}");
}

#[test]
fn a_fenced_producer_is_the_producers_fault_and_is_replaced() {
    // No broker is contacted: the producer connects in the background.
    let sink =
        KafkaSink::new("kafka://127.0.0.1:1?topic=t", &[], Duration::from_secs(2)).expect("sink");
    for (code, verdict, rebuild) in [
        (RDKafkaErrorCode::ProducerFenced, "unavailable", true),
        (RDKafkaErrorCode::Fatal, "unavailable", true),
        (RDKafkaErrorCode::MessageTimedOut, "unavailable", false),
        (RDKafkaErrorCode::MessageSizeTooLarge, "permanent", false),
    ] {
        sink.state.rebuild.store(false, Ordering::SeqCst);
        let rebuilt = || sink.state.rebuild.load(Ordering::SeqCst);
        assert_eq!(
            (verdict_of(&sink, code), rebuilt()),
            (verdict, rebuild),
            "{code:?}"
        );
    }
}

/// The kind of [`SinkError`] a delivery report with `code` is classified as.
fn verdict_of(sink: &KafkaSink, code: RDKafkaErrorCode) -> &'static str {
    match sink.classify("t", &KafkaError::MessageProduction(code)) {
        SinkError::Retryable { .. } => "retryable",
        SinkError::Permanent(_) => "permanent",
        SinkError::Unavailable { .. } => "unavailable",
        SinkError::Backpressure { .. } => "backpressure",
        SinkError::Refused { .. } => "refused",
        SinkError::Closed(_) => "closed",
        SinkError::Stalled(_) => "stalled",
    }
}

#[test]
fn a_timed_out_batch_replaces_only_a_producer_that_delivered_or_is_past_its_grace() {
    let s = Duration::from_secs;
    assert!(rebuild_after_timeout(true, s(0)), "a session that worked");
    assert!(
        !rebuild_after_timeout(false, s(5)),
        "may still be connecting"
    );
    assert!(!rebuild_after_timeout(false, FRESH_PRODUCER_GRACE - s(1)));
    assert!(rebuild_after_timeout(false, FRESH_PRODUCER_GRACE), "wedged");
}

#[test]
fn an_unknown_topic_is_believed_before_its_messages_time_out() {
    for publish in [1, 2, 15, 120] {
        let m = message_timeout(Duration::from_secs(publish));
        assert!(metadata_propagation(m) < m, "{publish}s");
    }
    let sink =
        KafkaSink::new("kafka://127.0.0.1:1?topic=t", &[], Duration::from_secs(15)).expect("sink");
    assert_eq!(
        sink.config.get("topic.metadata.propagation.max.ms"),
        Some("7000")
    );
    for (code, verdict) in [
        (RDKafkaErrorCode::UnknownTopicOrPartition, "backpressure"),
        (RDKafkaErrorCode::UnknownTopic, "backpressure"),
        (RDKafkaErrorCode::TopicAuthorizationFailed, "backpressure"),
        (RDKafkaErrorCode::SaslAuthenticationFailed, "unavailable"),
    ] {
        assert_eq!(verdict_of(&sink, code), verdict, "{code:?}");
    }
}

#[test]
fn the_message_timeout_is_below_the_publish_timeout() {
    assert_eq!(
        message_timeout(Duration::from_secs(15)),
        Duration::from_secs(14)
    );
    assert_eq!(
        message_timeout(Duration::from_secs(2)),
        Duration::from_millis(1600)
    );
    assert!(message_timeout(Duration::from_millis(50)) >= Duration::from_millis(100));
}

#[test]
fn a_refused_property_value_is_never_shown() {
    let err = KafkaSink::new(
        "kafka://127.0.0.1:9",
        &["acks=SecretCanary42".into()],
        Duration::from_secs(5),
    )
    .err()
    .expect("refused");
    let text = err.to_string();
    assert!(!text.contains("SecretCanary42"), "{text}");
    assert!(text.contains("acks"), "{text}");
}

#[test]
fn two_batches_are_kept_in_flight_by_default_and_a_batch_is_one_timeout() {
    // A batch's delivery reports leave the database idle: depth 2 drained 1.26-1.65x depth 1
    // (README "Broker sinks against their raw clients").
    let sink = KafkaSink::new("kafka://127.0.0.1:9", &[], Duration::from_secs(5)).unwrap();
    assert_eq!(sink.default_pipeline_depth(), 2);
    assert!(sink.batch_within_one_timeout());
}
