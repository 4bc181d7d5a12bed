// kafkajs idempotent and transactional producers against brook serve.
// Prints `name value` lines for tests/tests/e2e/client_transactions.rs to check;
// exits non-zero (with the reason on stderr) when a step fails or does not
// finish in time.
//
// idempotent: an idempotent producer sends RECORDS records to TOPIC-idempotent
//   (4 partitions, several sends); a consumer reads them.
// transactions: a transactional producer aborts a transaction of ABORTED
//   records, then commits one of RECORDS records, both over the 4 partitions
//   of TOPIC-transactions; a read_committed and a read_uncommitted consumer
//   read the topic.
// offsets: the same producer commits a transaction holding only
//   sendOffsets for GROUP; the admin client fetches the group's offsets.
// Usage: node kafkajs_transactions.js HOST:PORT TOPIC GROUP RECORDS ABORTED
const { Kafka, logLevel } = require('kafkajs')

const PARTITIONS = 4
// Every step gives up after this long: the test fails rather than hangs.
const WAIT_MS = 60000
// How long a read waits for a committed transaction's markers.
const SETTLE_MS = 10000
// Consumers keep consuming this long after the last expected record, so a
// duplicate or a record that should not be seen is.
const LINGER_MS = 1500
// The idempotent producer sends its records in this many requests.
const SENDS = 4

function emit (name, value) {
  console.log(`${name} ${value}`)
}

const sleep = ms => new Promise(resolve => setTimeout(resolve, ms))

async function waitUntil (what, condition) {
  const deadline = Date.now() + WAIT_MS
  while (!condition()) {
    if (Date.now() > deadline) throw new Error(`not within ${WAIT_MS} ms: ${what}`)
    await sleep(50)
  }
}

/**
 * The value `read()` settles on: read again until it equals `expected` or
 * SETTLE_MS pass, then the last value read (the test judges it). EndTxn is
 * answered once the coordinator has decided; like Kafka's, it writes the
 * markers, which move the last stable offset and make a transaction's
 * offsets the group's, just after.
 */
async function settled (read, expected) {
  const deadline = Date.now() + SETTLE_MS
  let value = await read()
  while (value !== expected && Date.now() < deadline) {
    await sleep(50)
    value = await read()
  }
  return value
}

/** `promise`, or an error naming `what` after WAIT_MS. */
async function step (what, promise) {
  let timer
  const timeout = new Promise((resolve, reject) => {
    timer = setTimeout(() => reject(new Error(`not within ${WAIT_MS} ms: ${what}`)), WAIT_MS)
  })
  try {
    return await Promise.race([promise, timeout])
  } catch (error) {
    error.message = `${what}: ${error.message}`
    throw error
  } finally {
    clearTimeout(timer)
  }
}

function offsetsText (offsets) {
  const partitions = Object.keys(offsets).map(Number).sort((a, b) => a - b)
  return partitions.map(p => `${p}:${offsets[p]}`).join(' ') || 'none'
}

function messages (tag, from, to) {
  const list = []
  for (let i = from; i < to; i++) {
    list.push({ key: `${tag}-${i}`, value: `${tag}-${i}`, partition: i % PARTITIONS })
  }
  return list
}

/**
 * Consumes `topic` from the beginning in a group of its own until `expected`
 * distinct keys came, and LINGER_MS more; returns [partition, offset, key]
 * for every delivery.
 */
async function consume (kafka, topic, group, expected, readUncommitted) {
  const deliveries = []
  const consumer = kafka.consumer({
    groupId: group,
    readUncommitted,
    sessionTimeout: 10000,
    heartbeatInterval: 500,
    maxWaitTimeInMs: 200,
    retry: { retries: 3 }
  })
  let crash
  consumer.on(consumer.events.CRASH, ({ payload }) => { crash = payload.error })
  await step(`${group} connects`, consumer.connect())
  await step(`${group} subscribes`, consumer.subscribe({ topics: [topic], fromBeginning: true }))
  await step(`${group} runs`, consumer.run({
    autoCommit: false,
    eachMessage: async ({ partition, message }) => {
      deliveries.push([partition, Number(message.offset), message.key.toString()])
    }
  }))
  await waitUntil(`${group}: ${expected} records`, () => {
    if (crash) throw crash
    return new Set(deliveries.map(d => d[2])).size >= expected
  })
  await sleep(LINGER_MS)
  await step(`${group} disconnects`, consumer.disconnect())
  if (crash) throw crash
  return deliveries
}

/** `<label>.records`, `.distinct` and `.unexpected` (keys not sent with `tag`). */
function emitDeliveries (label, deliveries, tags) {
  emit(`${label}.records`, deliveries.length)
  emit(`${label}.distinct`, new Set(deliveries.map(d => d[2])).size)
  const unexpected = deliveries.filter(d => !tags.some(tag => d[2].startsWith(`${tag}-`)))
  emit(`${label}.unexpected`, unexpected.length)
  for (const tag of tags) {
    emit(`${label}.${tag}`, new Set(deliveries.map(d => d[2]).filter(k => k.startsWith(`${tag}-`))).size)
  }
}

/** The sum of the partitions' high watermarks: how many offsets the log holds. */
async function logEnd (admin, topic) {
  const offsets = await step(`offsets of ${topic}`, admin.fetchTopicOffsets(topic))
  return offsets.reduce((sum, { high }) => sum + Number(high), 0)
}

async function idempotent (kafka, admin, topic, group, records) {
  const producer = kafka.producer({ idempotent: true, maxInFlightRequests: 1 })
  await step('idempotent producer connects', producer.connect())
  let acked = 0
  for (let s = 0; s < SENDS; s++) {
    const from = Math.floor(records * s / SENDS)
    const to = Math.floor(records * (s + 1) / SENDS)
    const results = await step(`idempotent send ${s}`,
      producer.send({ topic, acks: -1, messages: messages('idempotent', from, to) }))
    if (results.length === 0) throw new Error(`idempotent send ${s}: no partition acknowledged`)
    acked += to - from
  }
  await step('idempotent producer disconnects', producer.disconnect())
  emit('idempotent.acked', acked)
  emit('idempotent.log_end', await logEnd(admin, topic))
  const deliveries = await consume(kafka, topic, `${group}-idempotent`, records, false)
  emitDeliveries('idempotent', deliveries, ['idempotent'])
}

async function transactions (kafka, admin, producer, topic, group, records, aborted) {
  const abortedTxn = await step('begin the aborted transaction', producer.transaction())
  await step('send in the aborted transaction',
    abortedTxn.send({ topic, messages: messages('aborted', 0, aborted) }))
  await step('abort', abortedTxn.abort())
  emit('transactions.aborted', aborted)

  const committedTxn = await step('begin the committed transaction', producer.transaction())
  // Two sends: the second adds nothing new to the transaction's partitions.
  const half = Math.floor(records / 2)
  await step('first send in the committed transaction',
    committedTxn.send({ topic, messages: messages('committed', 0, half) }))
  await step('second send in the committed transaction',
    committedTxn.send({ topic, messages: messages('committed', half, records) }))
  await step('commit', committedTxn.commit())
  emit('transactions.committed', records)
  // The records and one marker per partition for each transaction.
  emit('transactions.log_end',
    await settled(() => logEnd(admin, topic), records + aborted + 2 * PARTITIONS))

  const committed = await consume(kafka, topic, `${group}-read-committed`, records, false)
  emitDeliveries('read_committed', committed, ['committed', 'aborted'])
  const uncommitted = await consume(kafka, topic, `${group}-read-uncommitted`, records + aborted, true)
  emitDeliveries('read_uncommitted', uncommitted, ['committed', 'aborted'])
}

async function offsets (admin, producer, topic, group) {
  const sent = {}
  for (let p = 0; p < PARTITIONS; p++) sent[p] = 10 * (p + 1)
  const txn = await step('begin the offsets transaction', producer.transaction())
  await step('sendOffsets', txn.sendOffsets({
    consumerGroupId: group,
    topics: [{
      topic,
      partitions: Object.keys(sent).map(p => ({ partition: Number(p), offset: String(sent[p]) }))
    }]
  }))
  await step('commit the offsets', txn.commit())
  emit('offsets.sent', offsetsText(sent))
  const fetchCommitted = async () => {
    const [fetched] = await step('fetchOffsets', admin.fetchOffsets({ groupId: group, topics: [topic] }))
    const committed = {}
    for (const { partition, offset } of fetched.partitions) committed[partition] = offset
    return offsetsText(committed)
  }
  emit('offsets.committed', await settled(fetchCommitted, offsetsText(sent)))
}

async function main (address, topic, group, records, aborted) {
  const kafka = new Kafka({
    clientId: 'kafkajs-transactions',
    brokers: [address],
    logLevel: logLevel.ERROR,
    retry: { retries: 5 }
  })
  const admin = kafka.admin()
  await step('admin connects', admin.connect())
  const idempotentTopic = `${topic}-idempotent`
  const transactionsTopic = `${topic}-transactions`
  await step('createTopics', admin.createTopics({
    topics: [idempotentTopic, transactionsTopic].map(t => ({ topic: t, numPartitions: PARTITIONS }))
  }))

  await idempotent(kafka, admin, idempotentTopic, group, records)

  const producer = kafka.producer({
    transactionalId: `${group}-producer`,
    idempotent: true,
    maxInFlightRequests: 1
  })
  await step('transactional producer connects', producer.connect())
  await transactions(kafka, admin, producer, transactionsTopic, group, records, aborted)
  await offsets(admin, producer, transactionsTopic, group)
  await step('transactional producer disconnects', producer.disconnect())
  await step('admin disconnects', admin.disconnect())
}

process.env.KAFKAJS_NO_PARTITIONER_WARNING = '1'
emit('kafkajs', require('kafkajs/package.json').version)
main(process.argv[2], process.argv[3], process.argv[4], Number(process.argv[5]), Number(process.argv[6]))
  .then(() => process.exit(0))
  .catch(error => { console.error(error); process.exit(1) })
