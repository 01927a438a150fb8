#!/usr/bin/env node
// The package's command: TypeScript sources run through tsx's loader, so there
// is no build step between a clone and `npx showrunner`.
import { register } from 'tsx/esm/api'

register()
await import('../src/cli.ts')
