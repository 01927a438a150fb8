import { describe, expect, it } from 'vitest'
import { createLogger, silentLogger } from '../src/log.ts'
import { captureLog } from './helpers/logCapture.ts'

describe('createLogger', () => {
  it('writes JSON lines tagged with the instance, at or above the level', () => {
    const { lines, stream } = captureLog()
    const log = createLogger({ level: 'info', instance: 'node-a', destination: stream })
    log.debug('hidden')
    log.info({ runId: 7 }, 'run started')
    expect(lines).toHaveLength(1)
    expect(lines[0]).toMatchObject({ level: 'info', instance: 'node-a', runId: 7, msg: 'run started' })
    expect(lines[0]?.time).toMatch(/^\d{4}-\d\d-\d\dT.*Z$/)
  })

  it('omits instance when none is given and defaults to info', () => {
    const { lines, stream } = captureLog()
    const log = createLogger({ destination: stream })
    expect(log.level).toBe('info')
    log.info('x')
    expect(lines[0]).not.toHaveProperty('instance')
    expect(lines[0]).not.toHaveProperty('pid')
  })

  it('redacts authorization headers and token fields wherever callers put them', () => {
    const { lines, stream } = captureLog()
    const log = createLogger({ destination: stream })
    const secret = 'Bearer s3cr3t-s3cr3t-s3cr3t'
    log.info({ authorization: secret, token: 'tok-1' }, 'top level')
    log.info({ headers: { authorization: secret, Authorization: secret, accept: 'json' } }, 'headers')
    log.info({ req: { headers: { authorization: secret } } }, 'request')
    log.info({ ctx: { req: { headers: { authorization: secret } } } }, 'nested request')
    log.info({ ws: { connectionParams: { authorization: secret } } }, 'websocket')
    log.info({ tokens: [{ role: 'admin', token: 'tok-2', actor: 'admin#12345678' }] }, 'config tokens')
    log.info({ config: { tokens: [{ role: 'admin', token: 'tok-3', actor: 'admin#12345678' }] } }, 'config')
    log.child({ entry: { token: 'tok-4' } }).info('child')
    const text = JSON.stringify(lines)
    expect(lines).toHaveLength(8)
    for (const s of ['s3cr3t', 'tok-1', 'tok-2', 'tok-3', 'tok-4']) expect(text).not.toContain(s)
    expect(lines[1]).toMatchObject({ headers: { authorization: '[redacted]', accept: 'json' } })
    expect(lines[5]).toMatchObject({
      tokens: [{ role: 'admin', token: '[redacted]', actor: 'admin#12345678' }],
    })
  })
})

describe('silentLogger', () => {
  it('is a logger that writes nothing', () => {
    const log = silentLogger()
    expect(log.level).toBe('silent')
    expect(() => log.error({ err: new Error('x') }, 'nothing')).not.toThrow()
    expect(log.isLevelEnabled('fatal')).toBe(false)
  })
})
