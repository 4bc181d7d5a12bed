// kafkajs consumer groups against brook serve. Prints `name value` lines for
// tests/tests/e2e/client_groups.rs to check; exits non-zero (with the reason on
// stderr) when a step does not finish in time.
//
// Creates TOPIC (4 partitions); two members of GROUP (consumer.run with
// eachMessage, autoCommit) share it and consume RECORDS records; they
// disconnect; RECORDS more are produced and a restarted member of GROUP
// (autoCommit off, commitOffsets at the end) consumes those.
// Usage: node kafkajs_group.js HOST:PORT TOPIC GROUP RECORDS
const { Kafka, logLevel } = require('kafkajs')

const PARTITIONS = 4
// Every wait gives up after this long: the test fails rather than hangs.
const WAIT_MS = 60000
// Members keep consuming this long after the last record, so a duplicate
// or a late rebalance is seen.
const LINGER_MS = 1500

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

function offsetsText (offsets) {
  const partitions = Object.keys(offsets).map(Number).sort((a, b) => a - b)
  return partitions.map(p => `${p}:${offsets[p]}`).join(' ') || 'none'
}

/** A group member: what it got, its latest assignment, how often it joined. */
async function startMember (kafka, group, topic, name, autoCommit) {
  const member = { name, deliveries: [], assignment: [], joins: 0 }
  member.consumer = kafka.consumer({
    groupId: group,
    sessionTimeout: 10000,
    heartbeatInterval: 500,
    maxWaitTimeInMs: 200,
    retry: { retries: 3 }
  })
  member.consumer.on(member.consumer.events.GROUP_JOIN, ({ payload }) => {
    member.joins += 1
    member.assignment = (payload.memberAssignment[topic] || []).slice().sort((a, b) => a - b)
  })
  member.consumer.on(member.consumer.events.CRASH, ({ payload }) => {
    member.crash = String(payload.error)
  })
  await member.consumer.connect()
  await member.consumer.subscribe({ topics: [topic], fromBeginning: true })
  await member.consumer.run({
    autoCommit,
    eachMessage: async ({ partition, message }) => {
      member.deliveries.push([partition, Number(message.offset), message.key.toString()])
    }
  })
  return member
}

async function produce (kafka, topic, records, tag) {
  const producer = kafka.producer()
  await producer.connect()
  const messages = []
  for (let i = 0; i < records; i++) {
    messages.push({ key: `${tag}-${i}`, value: `${tag}-${i}`, partition: i % PARTITIONS })
  }
  const results = await producer.send({ topic, acks: -1, messages })
  await producer.disconnect()
  // One batch per partition: key i went to offset base + i / PARTITIONS.
  const delivered = {}
  for (const { partition, baseOffset } of results) {
    for (let i = partition; i < records; i += PARTITIONS) {
      delivered[`${tag}-${i}`] = [partition, Number(baseOffset) + (i - partition) / PARTITIONS]
    }
  }
  return delivered
}

function distinct (deliveries) {
  return new Set(deliveries.map(([p, o]) => `${p}@${o}`)).size
}

function checkDeliveries (label, deliveries, delivered) {
  const misplaced = deliveries.filter(([p, o, key]) => {
    const at = delivered[key]
    return !at || at[0] !== p || at[1] !== o
  }).length
  emit(`${label}.records`, deliveries.length)
  emit(`${label}.distinct`, distinct(deliveries))
  emit(`${label}.misplaced`, misplaced)
}

async function committed (admin, group, topic) {
  const [fetched] = await admin.fetchOffsets({ groupId: group, topics: [topic] })
  const offsets = {}
  for (const { partition, offset } of fetched.partitions) offsets[partition] = offset
  return offsetsText(offsets)
}

async function main (address, topic, group, records) {
  const kafka = new Kafka({ clientId: 'kafkajs-group', brokers: [address], logLevel: logLevel.ERROR })
  const admin = kafka.admin()
  await admin.connect()
  await admin.createTopics({ topics: [{ topic, numPartitions: PARTITIONS }] })

  const pair = []
  for (const name of ['kafkajs-0', 'kafkajs-1']) {
    pair.push(await startMember(kafka, group, topic, name, true))
  }
  await waitUntil('the two members share the partitions', () => {
    const [a, b] = pair.map(m => m.assignment)
    return a.length === PARTITIONS / 2 && b.length === PARTITIONS / 2 && a.every(p => !b.includes(p))
  })
  const assignments = pair.map(m => m.assignment)
  const joinsBefore = pair.map(m => m.joins)
  pair.forEach(m => emit('first.assigned', `${m.name} ${m.assignment.join(',')}`))

  const delivered = await produce(kafka, topic, records, 'first')
  await waitUntil('every record of the first batch', () =>
    distinct(pair.flatMap(m => m.deliveries)) >= records)
  await sleep(LINGER_MS)
  const [description] = (await admin.describeGroups([group])).groups
  emit('active.state', description.state)
  emit('active.members', description.members.length)
  // Before any member leaves: the first to leave makes the other rejoin.
  pair.forEach((member, index) => {
    const unowned = member.deliveries.filter(([p]) => !assignments[index].includes(p))
    emit('first.unowned', `${member.name} ${unowned.length}`)
    emit('first.rejoins', `${member.name} ${member.joins - joinsBefore[index]}`)
  })
  await Promise.all(pair.map(member => member.consumer.disconnect()))
  pair.forEach(member => emit('first.crash', `${member.name} ${member.crash || 'none'}`))
  // Everything they got, until they disconnected.
  checkDeliveries('first', pair.flatMap(m => m.deliveries), delivered)
  emit('first.offsets', await committed(admin, group, topic))

  // A restarted member resumes where the pair committed (fromBeginning
  // would start it at 0 otherwise) and commits by itself.
  const later = await produce(kafka, topic, records, 'second')
  const restarted = await startMember(kafka, group, topic, 'kafkajs-2', false)
  await waitUntil('every record of the second batch', () => distinct(restarted.deliveries) >= records)
  await sleep(LINGER_MS)
  const firsts = {}
  const next = {}
  for (const [p, o] of restarted.deliveries) {
    firsts[p] = Math.min(o, firsts[p] === undefined ? o : firsts[p])
    next[p] = Math.max(o + 1, next[p] || 0)
  }
  emit('second.first_offsets', offsetsText(firsts))
  checkDeliveries('second', restarted.deliveries, later)
  await restarted.consumer.commitOffsets(
    Object.keys(next).map(p => ({ topic, partition: Number(p), offset: String(next[p]) })))
  await restarted.consumer.disconnect()
  emit('second.crash', `${restarted.name} ${restarted.crash || 'none'}`)
  emit('second.offsets', await committed(admin, group, topic))
  await admin.disconnect()
}

process.env.KAFKAJS_NO_PARTITIONER_WARNING = '1'
emit('kafkajs', require('kafkajs/package.json').version)
main(process.argv[2], process.argv[3], process.argv[4], Number(process.argv[5]))
  .then(() => process.exit(0))
  .catch(error => { console.error(error); process.exit(1) })
