#!/usr/bin/env node
// Peer comparison (issue 7, benches/peers/README.md): a kafkajs consumer
// whose handler is wrapped to track freshness, the way a kafkajs user
// typically adds it: the handler runs first, and only after it resolved is
// the event age (now - message timestamp, in ms) recorded into an
// OpenTelemetry histogram with topic and partition attributes.
//
//   node consume.js --bootstrap HOST:PORT --topic T[,T...] --records N
//                   [--group G] [--mode eachMessage|eachBatch] [--timeout-secs S]
//                   [--no-histogram]
//
// --no-histogram (a diagnostic) keeps the wrapper and the handler but skips
// the histogram record, to show what the OpenTelemetry SDK costs here.
//
// The histogram is real: @opentelemetry/sdk-metrics' MeterProvider, set as
// the global provider, with a PeriodicExportingMetricReader (60 s, so no
// export during a run) to an exporter that discards. Offsets are committed
// the kafkajs default way (autoCommit: true, no interval or threshold):
// kafkajs resolves a message's offset after its handler resolved and
// commits the resolved offsets after every fetched batch.
//
// Time runs from the first message handed to the handler to the N-th
// handled. Prints one JSON line, the same shape as the other peers.

'use strict'

const { Kafka, logLevel } = require('kafkajs')
const { metrics } = require('@opentelemetry/api')
const { MeterProvider, PeriodicExportingMetricReader } = require('@opentelemetry/sdk-metrics')

function parseArgs(argv) {
  const args = { mode: 'eachMessage', timeoutSecs: 300, histogram: true }
  for (let i = 0; i < argv.length; i++) {
    const flag = argv[i]
    const value = () => {
      if (i + 1 >= argv.length) throw new Error(`${flag} needs a value`)
      return argv[++i]
    }
    switch (flag) {
      case '--bootstrap': args.bootstrap = value(); break
      case '--topic': args.topics = value().split(',').filter(Boolean); break
      case '--group': args.group = value(); break
      case '--records': args.records = Number(value()); break
      case '--mode': args.mode = value(); break
      case '--timeout-secs': args.timeoutSecs = Number(value()); break
      case '--no-histogram': args.histogram = false; break
      default: throw new Error(`unknown argument ${flag}`)
    }
  }
  if (!args.bootstrap || !args.topics || !args.topics.length) throw new Error('--bootstrap and --topic are required')
  if (!(args.records > 0)) throw new Error('--records N (N > 0) is required')
  if (!['eachMessage', 'eachBatch'].includes(args.mode)) throw new Error('--mode is eachMessage or eachBatch')
  args.group = args.group || `peer-kafkajs-${process.pid}-${Date.now()}`
  return args
}

const AGE_METRIC = 'peer.event_age'

// An exporter that drops what it is given (the SDK still aggregates every
// measurement; nothing leaves the process), except the number of values in
// the age histogram, so a run can show every message's age was recorded.
let agesRecorded = 0
const discardExporter = {
  export(resourceMetrics, resultCallback) {
    let count = 0
    for (const scope of resourceMetrics.scopeMetrics) {
      for (const metric of scope.metrics) {
        if (metric.descriptor.name !== AGE_METRIC) continue
        for (const point of metric.dataPoints) count += point.value.count
      }
    }
    agesRecorded = count // cumulative temporality: the latest export holds everything
    resultCallback({ code: 0 /* ExportResultCode.SUCCESS */ })
  },
  forceFlush() { return Promise.resolve() },
  shutdown() { return Promise.resolve() },
}

const provider = new MeterProvider({
  readers: [new PeriodicExportingMetricReader({ exporter: discardExporter, exportIntervalMillis: 60000 })],
})
metrics.setGlobalMeterProvider(provider)

// The freshness wrapper. The age is recorded only once the handler resolved:
// a failed handler records nothing.
const eventAge = metrics.getMeter('peer-freshness').createHistogram(AGE_METRIC, {
  description: 'Event age (now - message timestamp) after the handler succeeded',
  unit: 'ms',
})

function trackFreshness(handler, record = true) {
  return async (payload) => {
    await handler(payload)
    const ageMs = Date.now() - Number(payload.message.timestamp)
    if (record) eventAge.record(ageMs, { topic: payload.topic, partition: String(payload.partition) })
  }
}

// The user's handler: a no-op.
async function handle(_payload) {}

async function main() {
  const args = parseArgs(process.argv.slice(2))
  const kafka = new Kafka({
    clientId: 'peer-kafkajs',
    brokers: [args.bootstrap],
    logLevel: logLevel.WARN,
  })
  const consumer = kafka.consumer({
    groupId: args.group,
    // The same settings as the librdkafka peers (benches' CONSUMER_PROPS):
    sessionTimeout: 6000, // a membership change on the mock waits session.timeout - 1 s
    maxWaitTimeInMs: 10, // = fetch.wait.max.ms: the mock holds an empty fetch this long
  })

  // Commits kafkajs sent (its COMMIT_OFFSETS event fires once per
  // successful OffsetCommit request).
  let commits = 0
  consumer.on(consumer.events.COMMIT_OFFSETS, () => { commits++ })

  let n = 0
  let first = null
  let last = null
  let finish
  const finished = new Promise((resolve) => { finish = resolve })
  const handled = () => {
    if (++n === args.records) {
      last = process.hrtime.bigint()
      finish()
    }
  }
  const wrapped = trackFreshness(handle, args.histogram)

  await consumer.connect()
  await consumer.subscribe({ topics: args.topics, fromBeginning: true })
  if (args.mode === 'eachMessage') {
    await consumer.run({
      eachMessage: async (payload) => {
        if (first === null) first = process.hrtime.bigint()
        await wrapped(payload)
        handled()
      },
    })
  } else {
    await consumer.run({
      eachBatch: async ({ batch, resolveOffset, heartbeat, isRunning, isStale }) => {
        if (first === null) first = process.hrtime.bigint()
        for (const message of batch.messages) {
          if (!isRunning() || isStale()) break
          await wrapped({ topic: batch.topic, partition: batch.partition, message })
          resolveOffset(message.offset)
          handled()
        }
        await heartbeat()
      },
    })
  }

  let timer
  const timeout = new Promise((_, reject) => {
    timer = setTimeout(() => reject(new Error(`deadline: ${n} of ${args.records} records handled`)), args.timeoutSecs * 1000)
  })
  try {
    await Promise.race([finished, timeout])
  } finally {
    clearTimeout(timer)
    await consumer.disconnect() // commits the resolved offsets, leaves the group
    await provider.shutdown() // exports the final histogram once
  }
  const seconds = Number(last - first) / 1e9
  console.log(JSON.stringify({
    client: 'kafkajs',
    mode: args.histogram ? args.mode : `${args.mode}, no histogram`,
    records: args.records,
    seconds: Number(seconds.toFixed(4)),
    records_per_s: Math.round(args.records / seconds),
    ages_recorded: agesRecorded,
    commits,
    group: args.group,
    kafkajs: require('kafkajs/package.json').version,
    node: process.version,
  }))
}

main().catch((e) => {
  console.error(`consume.js: ${e && e.stack ? e.stack : e}`)
  process.exit(1)
})
