"""kafka-python against brook serve: create a topic, produce with acks=all,
consume every record back by partition assignment. Prints one summary line.
Usage: python3 kafka_python_round_trip.py HOST:PORT RECORDS"""
import sys

import kafka
from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import KafkaAdminClient, NewTopic

address, records = sys.argv[1], int(sys.argv[2])
admin = KafkaAdminClient(bootstrap_servers=address)
admin.create_topics([NewTopic("python", num_partitions=3, replication_factor=1)])
producer = KafkaProducer(bootstrap_servers=address, acks="all")
futures = [producer.send("python", key=str(i).encode(), value=("value-%d" % i).encode(), headers=[("n", str(i).encode())])
           for i in range(records)]
producer.flush()
delivered = {str(i): (f.get().partition, f.get().offset) for i, f in enumerate(futures)}
partitions = [TopicPartition("python", p) for p in range(3)]
consumer = KafkaConsumer(bootstrap_servers=address, enable_auto_commit=False, consumer_timeout_ms=10000)
consumer.assign(partitions)
consumer.seek_to_beginning()
good = 0
for message in consumer:
    key = message.key.decode()
    if (delivered[key] == (message.partition, message.offset) and message.value == ("value-%s" % key).encode()
            and message.headers == [("n", key.encode())]):
        good += 1
    if good == records:
        break
print("kafka-python %s: %d of %d records round-tripped" % (kafka.__version__, good, records))
