/**
 * The real server (src/server.ts buildApp) on an ephemeral 127.0.0.1 port, over
 * a bench database, configured through the same loadConfig as production.
 */
import { loadConfig } from '../src/config.ts'
import { silentLogger } from '../src/log.ts'
import { type App, buildApp } from '../src/server.ts'

export const BENCH_TOKENS = {
  viewer: 'bench-viewer-token-0123456789',
  operator: 'bench-operator-token-0123456789',
} as const

/**
 * Named viewers, for benchmarks that hold more subscriptions than one caller
 * may (`SUBSCRIPTIONS_PER_PRINCIPAL`, 200): as a venue's screens each signed
 * in on their own. Subscriber i uses `BENCH_VIEWER_TOKENS[i % 20]`.
 */
export const BENCH_VIEWER_TOKENS: readonly string[] = Array.from(
  { length: 20 },
  (_, i) => `bench-viewer-${i}-token-0123456789`,
)

export interface BenchServer {
  app: App
  graphqlUrl: string
  wsUrl: string
  stop(): Promise<void>
}

export async function startBenchServer(
  databaseUrl: string,
  env: Record<string, string> = {},
): Promise<BenchServer> {
  const config = loadConfig({
    PORT: '0',
    HOST: '127.0.0.1',
    DATABASE_URL: databaseUrl,
    SHOWRUNNER_TOKENS: [
      ...Object.entries(BENCH_TOKENS).map(([role, token]) => `${role}:${token}`),
      ...BENCH_VIEWER_TOKENS.map((token, i) => `viewer:screen-${i}=${token}`),
    ].join(','),
    LOG_LEVEL: 'silent',
    INSTANCE_ID: `bench-server-${process.pid}`,
    ...env,
  })
  const app = buildApp(config, { logger: silentLogger() })
  const { url } = await app.start()
  const graphqlUrl = `${url}/graphql`
  return { app, graphqlUrl, wsUrl: graphqlUrl.replace(/^http/, 'ws'), stop: () => app.stop() }
}
