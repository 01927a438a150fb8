/**
 * The peer: graphile-worker 0.17.3 on the local PostgreSQL, executing no-op jobs
 * queued with one `add_jobs` call, in its fastest documented configuration
 * (https://worker.graphile.org/docs/performance): 24 concurrent jobs, a pool of
 * 25, a local queue of 500 and batched completion with no delay. Each run gets
 * a fresh PostgreSQL database, dropped afterwards.
 */
import { randomBytes } from 'node:crypto'
import pg from 'pg'
import { cpuMeter, runMain, sleep } from './lib.ts'

export const PEER_SERVER = process.env.BENCH_PG_URL ?? 'postgres://postgres@127.0.0.1:5432/postgres'
const JOBS = Number(process.env.BENCH_RUNS ?? 20_000)

export interface PeerMeasure {
  jobsPerSecond: number
  seconds: number
  jobs: number
  /** CPU per job, in µs, of this process (the worker) and of the local PostgreSQL (null if not local). */
  cpuPerJob: { workerUs: number; databaseUs: number | null }
}

async function withAdmin<T>(fn: (c: pg.Client) => Promise<T>): Promise<T> {
  const c = new pg.Client({ connectionString: PEER_SERVER })
  await c.connect()
  try {
    return await fn(c)
  } finally {
    await c.end()
  }
}

/** Time from starting the worker until every queued job is durably gone from the queue. */
export async function measurePeer(jobs = JOBS): Promise<PeerMeasure> {
  const { Logger, makeWorkerUtils, run, runMigrations } = await import('graphile-worker')
  const name = `showrunner_peer_${randomBytes(4).toString('hex')}`
  await withAdmin((c) => c.query(`CREATE DATABASE ${name}`))
  const url = new URL(PEER_SERVER)
  url.pathname = `/${name}`
  const connectionString = url.toString()
  const logger = new Logger(() => (level, message) => {
    if (level === 'error') console.error(`graphile-worker: ${message}`)
  })
  try {
    await runMigrations({ connectionString, logger })
    const utils = await makeWorkerUtils({ connectionString, logger })
    try {
      // One add_jobs call for the whole queue.
      await utils.addJobs(Array.from({ length: jobs }, (_, i) => ({ identifier: 'noop', payload: { i } })))
    } finally {
      await utils.release()
    }
    const probe = new pg.Client({ connectionString })
    await probe.connect()
    let executed = 0
    const started = performance.now()
    const cpu = cpuMeter('postgres')
    // The worker's pool is ours, so that it is ended before the database is
    // dropped: a client graphile-worker's own pool still held after stop()
    // was once terminated by the DROP … WITH (FORCE), and its unhandled
    // 'error' event ended the whole benchmark.
    const pgPool = new pg.Pool({ connectionString, max: 25 })
    const onError = (err: Error) => console.error(`graphile-worker pool: ${err.message}`)
    pgPool.on('error', onError)
    pgPool.on('connect', (client) => client.on('error', onError))
    const runner = await run({
      pgPool,
      logger,
      noHandleSignals: true,
      concurrency: 24,
      maxPoolSize: 25,
      taskList: { noop: async () => {} },
      preset: { worker: { localQueue: { size: 500 }, completeJobBatchDelay: 0, failJobBatchDelay: 0 } },
    })
    runner.events.on('job:complete', () => {
      executed++
    })
    let seconds = Number.NaN
    let spent = { processUs: 0, databaseUs: null as number | null }
    try {
      // Bounded: at worst 5 minutes. Cheap waits until the handlers ran, then
      // a tight check for the completions to be committed.
      const deadline = Date.now() + 300_000
      while (executed < jobs && Date.now() < deadline) await sleep(20)
      while (Date.now() < deadline) {
        const { rows } = await probe.query('SELECT count(*)::int AS n FROM graphile_worker._private_jobs')
        if (rows[0].n === 0) {
          seconds = (performance.now() - started) / 1000
          break
        }
        await sleep(2)
      }
    } finally {
      spent = cpu.perUnit(jobs)
      await runner.stop()
      await probe.end()
      await pgPool.end()
    }
    if (Number.isNaN(seconds)) throw new Error(`graphile-worker did not finish ${jobs} jobs within 5 minutes`)
    const cpuPerJob = { workerUs: spent.processUs, databaseUs: spent.databaseUs }
    return { jobsPerSecond: jobs / seconds, seconds, jobs, cpuPerJob }
  } finally {
    await withAdmin((c) => c.query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`))
  }
}

runMain(import.meta.url, async () => {
  const peer = await measurePeer()
  console.log(
    `graphile-worker: ${peer.jobsPerSecond.toFixed(0)} jobs/s (${peer.jobs} jobs in ${peer.seconds.toFixed(2)} s)`,
  )
})
