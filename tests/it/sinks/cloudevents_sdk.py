# Reads what the relay sent with the official CloudEvents SDK for Python (PyPI `cloudevents`, 2.x:
# `cloudevents.core.bindings`), for tests/it/sinks/cloudevents.rs. The request comes as JSON on
# stdin; for each message the answer (JSON on stdout) holds the event's attributes as the SDK
# parsed them (`time` in ISO 8601), the data as the SDK parsed it, and, for Kafka, the record as
# confluent-kafka consumed it. Any SDK refusal (a missing or invalid attribute) fails the script.
import base64
import json
import sys
import time

from cloudevents.core.bindings import amqp, http, kafka
from cloudevents.core.formats.json import JSONFormat


def parsed(event):
    attributes = dict(event.get_attributes())
    if attributes.get("time") is not None:
        attributes["time"] = attributes["time"].isoformat()
    data = event.get_data()
    if isinstance(data, (bytes, bytearray)):
        data = {"bytes_b64": base64.b64encode(data).decode()}
    return {"attributes": attributes, "data": data}


def kafka_records(req):
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    c = Consumer(
        {
            "bootstrap.servers": req["bootstrap"],
            "group.id": "outboxctl-cloudevents-tests",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
        }
    )
    topic = req["topic"]
    parts = c.list_topics(topic, timeout=10).topics[topic].partitions
    c.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in parts])
    out = []
    deadline = time.time() + 60
    while len(out) < req["expected"] and time.time() < deadline:
        m = c.poll(0.5)
        if m is None or m.error():
            continue
        out.append(m)
    c.close()
    return out


def main():
    req = json.load(sys.stdin)
    fmt = JSONFormat()
    out = []
    if req["binding"] == "http":
        for m in req["messages"]:
            msg = http.HTTPMessage(headers=m["headers"], body=base64.b64decode(m["body"]))
            out.append(parsed(http.from_http(msg, fmt)))
    elif req["binding"] == "amqp":
        for m in req["messages"]:
            msg = amqp.AMQPMessage(
                properties={"content-type": m["content_type"]},
                application_properties=m["application_properties"],
                application_data=base64.b64decode(m["body"]),
            )
            out.append(parsed(amqp.from_binary(msg, fmt)))
    elif req["binding"] == "kafka":
        for m in kafka_records(req):
            headers = list(m.headers() or [])
            msg = kafka.KafkaMessage(
                headers={k: v for k, v in headers}, key=m.key(), value=m.value()
            )
            one = parsed(kafka.from_binary(msg, fmt))
            one["value_b64"] = base64.b64encode(m.value()).decode()
            one["headers"] = [[k, v.decode("utf-8")] for k, v in headers]
            out.append(one)
    else:
        raise SystemExit("unknown binding " + req["binding"])
    json.dump(out, sys.stdout)


main()
