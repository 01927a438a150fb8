import { createRequire } from 'node:module'
import { defineConfig } from 'vitest/config'

const require = createRequire(import.meta.url)

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
  resolve: {
    dedupe: ['graphql'],
    // graphql 16 ships a CJS build (`main`) and an ESM one (`module`). Node, and so
    // yoga, Pothos and graphql-ws (all external), loads the CJS file; Vite would
    // give our own files the ESM one: a second copy, and `instanceof GraphQLError`
    // fails across them. Point the bare specifier at the file Node loads.
    alias: [{ find: /^graphql$/, replacement: require.resolve('graphql') }],
  },
})
