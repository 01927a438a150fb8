/**
 * The three-node Galera cluster of test/galera/cluster.sh, from TypeScript: for
 * the Galera drill and the `galera` benchmark (never for `npm test`, which runs
 * against the single test server).
 */
import { spawn } from 'node:child_process'
import { randomBytes } from 'node:crypto'
import { fileURLToPath } from 'node:url'
import mysql from 'mysql2/promise'

export const CLUSTER_SCRIPT = fileURLToPath(new URL('./cluster.sh', import.meta.url))

/** Client ports of nodes 1, 2 and 3 (the script's GALERA_PORT_BASE + N). */
export const NODE_PORTS = [1, 2, 3].map((n) => Number(process.env.GALERA_PORT_BASE ?? 3310) + n) as [
  number,
  number,
  number,
]

/**
 * Run the cluster script (`start`, `stop`, `status`, `reset`, `start-node N`,
 * `kill-node N`); answers its output, rejects with it when the script fails.
 */
export function cluster(args: string[], timeoutMs = 300_000): Promise<string> {
  return new Promise((resolve, reject) => {
    const child = spawn('bash', [CLUSTER_SCRIPT, ...args], { stdio: ['ignore', 'pipe', 'pipe'] })
    let out = ''
    child.stdout.on('data', (c: Buffer) => {
      out += c.toString('utf8')
    })
    child.stderr.on('data', (c: Buffer) => {
      out += c.toString('utf8')
    })
    const timer = setTimeout(() => child.kill('SIGKILL'), timeoutMs)
    child.once('exit', (code, signal) => {
      clearTimeout(timer)
      if (code === 0) resolve(out.trim())
      else reject(new Error(`cluster.sh ${args.join(' ')} failed (${code ?? signal}):\n${out.trim()}`))
    })
  })
}

/** A URL for node `n` (1-based), optionally naming a database. */
export function nodeUrl(n: number, database = ''): string {
  return `mysql://root@127.0.0.1:${NODE_PORTS[n - 1]}/${database}`
}

/** A fresh database on the cluster (created through node 1, replicated to all). */
export async function createClusterDatabase(
  prefix: string,
): Promise<{ name: string; drop(): Promise<void> }> {
  const name = `${prefix}_${randomBytes(4).toString('hex')}`
  const admin = await mysql.createConnection({ host: '127.0.0.1', port: NODE_PORTS[0], user: 'root' })
  try {
    await admin.query(`CREATE DATABASE \`${name}\` CHARACTER SET utf8mb4 COLLATE utf8mb4_unicode_ci`)
  } finally {
    await admin.end()
  }
  return {
    name,
    async drop() {
      if (process.env.KEEP_TEST_DB === '1') return
      const c = await mysql.createConnection({ host: '127.0.0.1', port: NODE_PORTS[0], user: 'root' })
      try {
        await c.query(`DROP DATABASE IF EXISTS \`${name}\``)
      } finally {
        await c.end()
      }
    },
  }
}

/** Certification conflicts a node has seen: transactions that failed certification, and local ones aborted by a replicated write. */
export interface ConflictCounters {
  certFailures: number
  bfAborts: number
}

/** The conflict counters of the server at `port` (zeros on a server that is not a Galera node). */
export async function conflictCounters(port: number, host = '127.0.0.1'): Promise<ConflictCounters> {
  const c = await mysql.createConnection({ host, port, user: 'root' })
  try {
    const [rows] = await c.query<mysql.RowDataPacket[]>(
      `SHOW GLOBAL STATUS WHERE Variable_name IN ('wsrep_local_cert_failures', 'wsrep_local_bf_aborts')`,
    )
    const get = (name: string) => Number(rows.find((r) => r.Variable_name === name)?.Value ?? 0)
    return { certFailures: get('wsrep_local_cert_failures'), bfAborts: get('wsrep_local_bf_aborts') }
  } finally {
    await c.end()
  }
}
