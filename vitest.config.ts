import { defineConfig } from 'vitest/config'

// Every test file gets its own throwaway database (test/helpers/db.ts), so files
// may run in parallel; two workers match the machine's two cores.
export default defineConfig({
  test: {
    include: ['test/**/*.test.ts'],
    pool: 'forks',
    maxWorkers: 2,
    testTimeout: 60_000,
    hookTimeout: 60_000,
    globalSetup: ['test/helpers/globalSetup.ts'],
    // One copy of graphql: Vite must not bundle a second one beside yoga's, or
    // resolver errors reach clients as "Unexpected error." under test only.
    server: { deps: { external: [/node_modules/] } },
  },
  resolve: { dedupe: ['graphql'] },
})
