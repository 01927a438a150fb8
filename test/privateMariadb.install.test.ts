/** A first-run install that fails is reported by its cause, not by the advice mariadb-install-db prints last. */
import { chmodSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { afterAll, expect, it } from 'vitest'
import { startPrivateMariadb } from '../src/privateMariadb.ts'

const dir = mkdtempSync(join(tmpdir(), 'sr-install-'))
afterAll(() => rmSync(dir, { recursive: true, force: true }))

it('quotes the [ERROR] lines of a failed mariadb-install-db', async () => {
  const fake = join(dir, 'fake-install-db')
  const advice = Array.from({ length: 30 }, (_, i) => `echo "generic advice line ${i}"`).join('\n')
  writeFileSync(
    fake,
    `#!/bin/sh\necho "2026-12-01  0:00:00 0 [ERROR] InnoDB: the disk is full (made up for this test)"\n${advice}\nexit 1\n`,
  )
  chmodSync(fake, 0o755)
  const started = startPrivateMariadb({
    dir: join(dir, 'db'),
    binaries: { mariadbd: '/bin/false', installDb: fake },
  })
  await expect(started).rejects.toThrow(/mariadb-install-db failed \(exit code 1\)/)
  await expect(started).rejects.toThrow(/\[ERROR\] InnoDB: the disk is full/)
})
