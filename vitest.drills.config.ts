import { createRequire } from 'node:module'
import { defineConfig } from 'vitest/config'

const require = createRequire(import.meta.url)

// The fault drills live in test/drills/. The ones that take under a
// minute (dbOutage, fuzz: `*.drill.test.ts`) run in `npm test` through
// vitest.config.ts's `test/**/*.test.ts`. The longer ones (`*.drill.ts`: the
// four-process SIGKILL drill) are left out of that glob by their suffix and run
// here, `npm run drills`, which .ci/run runs after `npm test`. They start real
// server processes and thousands of requests, so they run one file at a time:
// on two cores, drills competing with each other would measure the machine.
export default defineConfig({
  test: {
    include: ['test/drills/**/*.drill.ts'],
    pool: 'forks',
    maxWorkers: 1,
    fileParallelism: false,
    testTimeout: 240_000,
    hookTimeout: 90_000,
    globalSetup: ['test/helpers/globalSetup.ts'],
    // As in vitest.config.ts: one copy of graphql.
    server: { deps: { external: [/node_modules/] } },
  },
  resolve: {
    dedupe: ['graphql'],
    alias: [{ find: /^graphql$/, replacement: require.resolve('graphql') }],
  },
})
