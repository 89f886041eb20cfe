#!/usr/bin/env python3
"""Raw client ceilings for bench/sinks.sh: each sends COUNT messages of SIZE bytes the way a plain
client would, as fast as it can, and prints messages per second.

  raw_clients.py kafka BOOTSTRAP TOPIC COUNT SIZE   confluent-kafka (librdkafka), idempotent,
                                                     keyed, 3 headers, produce all then flush
  raw_clients.py nats URL SUBJECT COUNT SIZE        nats-py JetStream, async publishes in a
                                                     window of 1000 outstanding acks
  raw_clients.py amqp QUEUE COUNT SIZE              pika, publisher confirms, persistent
  raw_clients.py kafka-setup BOOTSTRAP TOPIC       creates TOPIC (one message, flushed), so a timed
                                                     run does not include the topic's creation
  raw_clients.py kafka-create BOOTSTRAP TOPIC      creates TOPIC empty (admin API, 4 partitions)
  raw_clients.py nats-setup URL STREAM SUBJECTS | nats-teardown URL STREAM
  raw_clients.py amqp-setup QUEUE | amqp-teardown QUEUE
"""
import asyncio
import sys
import time


def kafka(bootstrap, topic, count, size):
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True,
                  "partitioner": "murmur2_random", "message.timeout.ms": 30000})
    value = b"x" * size
    failed = 0

    def report(err, _msg):
        nonlocal failed
        if err is not None:
            failed += 1

    start = time.monotonic()
    for i in range(count):
        while True:
            try:
                p.produce(topic, key=str(i).encode(), value=value, on_delivery=report,
                          headers=[("id", str(i).encode()), ("idempotency_key", b"k%d" % i),
                                   ("event_type", b"order.placed")])
                break
            except BufferError:
                p.poll(0.01)
        p.poll(0)
    p.flush(60)
    elapsed = time.monotonic() - start
    if failed:
        sys.exit(f"kafka: {failed} deliveries failed")
    return count / elapsed


def kafka_setup(bootstrap, topic):
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bootstrap})
    p.produce(topic, value=b"setup")
    if p.flush(30) != 0:
        sys.exit(f"kafka-setup: could not create {topic}")


def kafka_create(bootstrap, topic):
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    for fut in admin.create_topics([NewTopic(topic, num_partitions=4)]).values():
        fut.result(30)


async def nats_pub(url, subject, count, size):
    import nats

    nc = await nats.connect(url)
    js = nc.jetstream()
    value = b"x" * size
    start = time.monotonic()
    window = 1000
    for base in range(0, count, window):
        await asyncio.gather(*[
            js.publish(subject, value, headers={"Nats-Msg-Id": f"{start}-{i}"})
            for i in range(base, min(count, base + window))
        ])
    elapsed = time.monotonic() - start
    await nc.close()
    return count / elapsed


async def nats_setup(url, stream, subjects):
    import nats

    nc = await nats.connect(url)
    js = nc.jetstream()
    try:
        await js.delete_stream(stream)
    except Exception:
        pass
    await js.add_stream(name=stream, subjects=[subjects])
    await nc.close()


async def nats_teardown(url, stream):
    import nats

    nc = await nats.connect(url)
    try:
        await nc.jetstream().delete_stream(stream)
    except Exception:
        pass
    await nc.close()


def amqp_channel():
    import pika

    conn = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", 5672))
    return conn, conn.channel()


def amqp(queue, count, size):
    import pika

    conn, ch = amqp_channel()
    ch.confirm_delivery()
    value = b"x" * size
    props = pika.BasicProperties(delivery_mode=2, content_type="application/json")
    start = time.monotonic()
    for i in range(count):
        ch.basic_publish("", queue, value, properties=props, mandatory=True)
    elapsed = time.monotonic() - start
    conn.close()
    return count / elapsed


def main():
    cmd, args = sys.argv[1], sys.argv[2:]
    if cmd == "kafka":
        rate = kafka(args[0], args[1], int(args[2]), int(args[3]))
    elif cmd == "nats":
        rate = asyncio.run(nats_pub(args[0], args[1], int(args[2]), int(args[3])))
    elif cmd == "amqp":
        rate = amqp(args[0], int(args[1]), int(args[2]))
    elif cmd == "kafka-create":
        return kafka_create(*args)
    elif cmd == "kafka-setup":
        return kafka_setup(*args)
    elif cmd == "nats-setup":
        return asyncio.run(nats_setup(*args))
    elif cmd == "nats-teardown":
        return asyncio.run(nats_teardown(*args))
    elif cmd == "amqp-setup":
        conn, ch = amqp_channel()
        ch.queue_delete(args[0])
        ch.queue_declare(args[0], durable=True)
        return conn.close()
    elif cmd == "amqp-teardown":
        conn, ch = amqp_channel()
        ch.queue_delete(args[0])
        return conn.close()
    else:
        sys.exit(f"unknown command {cmd}")
    print(round(rate))


if __name__ == "__main__":
    main()
