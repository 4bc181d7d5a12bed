// kafkajs against brook serve: create a topic, produce with acks=-1, read the
// offsets back. (kafkajs consumes only through consumer groups.)
// Usage: node kafkajs_produce.js HOST:PORT RECORDS
const { Kafka, logLevel } = require('kafkajs')

async function main (address, records) {
  const kafka = new Kafka({ clientId: 'kafkajs-test', brokers: [address], logLevel: logLevel.ERROR })
  const admin = kafka.admin()
  await admin.connect()
  await admin.createTopics({ topics: [{ topic: 'javascript', numPartitions: 2 }] })
  const producer = kafka.producer()
  await producer.connect()
  for (let i = 0; i < records; i++) {
    await producer.send({ topic: 'javascript', acks: -1, messages: [{ key: 'k' + i, value: 'v' + i, headers: { n: String(i) } }] })
  }
  const offsets = await admin.fetchTopicOffsets('javascript')
  const total = offsets.reduce((sum, partition) => sum + Number(partition.high), 0)
  console.log(`kafkajs ${require('kafkajs/package.json').version}: ${total} of ${records} records stored`)
  await producer.disconnect()
  await admin.disconnect()
}

process.env.KAFKAJS_NO_PARTITIONER_WARNING = '1'
main(process.argv[2], Number(process.argv[3])).catch(error => { console.error(error); process.exit(1) })
