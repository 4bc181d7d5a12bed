#!/usr/bin/env python3
"""Where a Kafka client's time goes, read from a loopback capture.

Capture one client run against a broker (Brook or Kafka) on 127.0.0.1:

    tcpdump -i lo -s 200 -w run.pcap tcp port PORT &
    kcat -C -b 127.0.0.1:PORT -t TOPIC -o beginning -e -q      # or
    java -cp "$LIB/*" org.apache.kafka.tools.EndToEndLatency \\
        127.0.0.1:PORT TOPIC 3000 all 1024

then:

    wire-phases.py fetch run.pcap PORT        # a reader (kcat, consumer-perf)
    wire-phases.py end-to-end run.pcap PORT   # EndToEndLatency

`fetch` splits the connection that received the most bytes into its
fetches: request -> first response byte (the broker's turnaround),
first -> last response byte (the transfer), and last byte -> next request
(the client's own work). A client with one fetch in flight per broker
(librdkafka) is bound by their sum.

`end-to-end` follows each record: Produce request -> its response (the
acknowledgement), the consumer's Fetch request -> the response carrying
the record, and the gaps between, which are the clients' own time.

Only the Kafka frame headers are read (api key of each request), so a
snap length of 200 bytes is enough. Standard library only.
"""

import statistics
import struct
import sys

PRODUCE, FETCH = 0, 1


def packets(path, port):
    """(time, client port, to_broker, payload length, payload head) of every
    TCP segment with a payload."""
    data = open(path, "rb").read()
    magic = struct.unpack("<I", data[:4])[0]
    nanos = magic == 0xA1B23C4D
    link = struct.unpack("<I", data[20:24])[0]
    link_header = {1: 14, 113: 16}.get(link, 0)
    offset = 24
    while offset + 16 <= len(data):
        seconds, fraction, captured, _ = struct.unpack("<IIII", data[offset : offset + 16])
        offset += 16
        frame = data[offset : offset + captured]
        offset += captured
        ip = frame[link_header:]
        if len(ip) < 20 or ip[0] >> 4 != 4:
            continue
        ip_header = (ip[0] & 15) * 4
        total = struct.unpack(">H", ip[2:4])[0]
        tcp = ip[ip_header:]
        source, destination = struct.unpack(">HH", tcp[:4])
        tcp_header = (tcp[12] >> 4) * 4
        length = total - ip_header - tcp_header
        if length <= 0:
            continue
        at = seconds + fraction / (1e9 if nanos else 1e6)
        to_broker = destination == port
        client = source if to_broker else destination
        yield at, client, to_broker, length, tcp[tcp_header:]


def api_key(head):
    """The api key of a request frame starting in `head`, if it starts one."""
    return struct.unpack(">h", head[4:6])[0] if len(head) >= 6 else None


def summary(name, values_ms):
    values = sorted(values_ms)
    if not values:
        print(f"  {name:34} (none)")
        return
    at = lambda q: values[min(len(values) - 1, int(len(values) * q))]
    print(
        f"  {name:34} mean {statistics.mean(values):7.3f} ms  p50 {at(0.5):7.3f}"
        f"  p90 {at(0.9):7.3f}  p99 {at(0.99):7.3f}  sum {sum(values):8.0f} ms"
    )


def fetch_phases(path, port):
    segments = list(packets(path, port))
    received = {}
    for _, client, to_broker, length, _ in segments:
        if not to_broker:
            received[client] = received.get(client, 0) + length
    reader = max(received, key=received.get)
    fetches, current = [], None
    for at, client, to_broker, length, _ in segments:
        if client != reader:
            continue
        if to_broker:
            if current:
                fetches.append(current)
            current = {"request": at, "first": None, "last": None, "bytes": 0}
        elif current:
            current["first"] = current["first"] or at
            current["last"] = at
            current["bytes"] += length
    if current:
        fetches.append(current)
    big = [f for f in fetches if f["bytes"] > 100_000]
    print(
        f"{path}: {len(fetches)} requests, {len(big)} responses over 100 kB, "
        f"mean {statistics.mean(f['bytes'] for f in big) / 1e6:.2f} MB"
    )
    summary("request -> first response byte", [(f["first"] - f["request"]) * 1e3 for f in big])
    summary("first -> last response byte", [(f["last"] - f["first"]) * 1e3 for f in big])
    summary(
        "last byte -> next request (client)",
        [(b["request"] - a["last"]) * 1e3 for a, b in zip(fetches, fetches[1:]) if a["bytes"] > 100_000],
    )


def end_to_end_phases(path, port):
    segments = list(packets(path, port))
    producers, consumers = set(), set()
    for _, client, to_broker, _, head in segments:
        if to_broker:
            key = api_key(head)
            (producers if key == PRODUCE else consumers if key == FETCH else set()).add(client)
    rounds, current, fetch_sent = [], None, None
    for at, client, to_broker, length, head in segments:
        if to_broker and client in consumers and api_key(head) == FETCH:
            fetch_sent = at
        elif to_broker and client in producers and api_key(head) == PRODUCE and length > 1000:
            if current:
                rounds.append(current)
            current = {"produce": at, "ack": None, "fetched": None, "fetch_sent": None}
        elif current and not to_broker and client in producers and current["ack"] is None:
            current["ack"] = at
        elif current and not to_broker and client in consumers and length > 1000 and current["fetched"] is None:
            current["fetched"], current["fetch_sent"] = at, fetch_sent
    if current:
        rounds.append(current)
    done = [r for r in rounds if r["ack"] and r["fetched"] and r["fetch_sent"]]
    print(f"{path}: {len(done)} records")
    ms = lambda a, b: (b - a) * 1e3
    summary("produce -> acknowledged", [ms(r["produce"], r["ack"]) for r in done])
    summary("acknowledged -> fetch sent (client)", [ms(r["ack"], r["fetch_sent"]) for r in done])
    summary("fetch sent -> record received", [ms(r["fetch_sent"], r["fetched"]) for r in done])
    summary(
        "received -> next produce (client)",
        [ms(max(a["ack"], a["fetched"]), b["produce"]) for a, b in zip(done, done[1:])],
    )
    summary("whole round", [ms(a["produce"], b["produce"]) for a, b in zip(done, done[1:])])


if __name__ == "__main__":
    if len(sys.argv) != 4 or sys.argv[1] not in ("fetch", "end-to-end"):
        sys.exit(__doc__)
    kind, pcap, broker_port = sys.argv[1], sys.argv[2], int(sys.argv[3])
    (fetch_phases if kind == "fetch" else end_to_end_phases)(pcap, broker_port)
