/**
 * sql/eventDefinitions.ts and sql/eventVersions.ts against a real MariaDB:
 * unique slugs, the materialisation watermark, version numbering (also under
 * concurrent publishers) and invariant 15 (no archive while a run is live).
 */
import { describe, expect, it } from 'vitest'
import { DatabaseError, DB_ERRNO, type Db, isDbErrno } from '../sql/db.ts'
import * as definitions from '../sql/eventDefinitions.ts'
import * as runs from '../sql/eventRuns/index.ts'
import * as versions from '../sql/eventVersions.ts'
import type { RunStatus } from '../sql/states.ts'
import { useTestDb } from './helpers/db.ts'
import { at, makeDefinition, makeRun, newRun, unique } from './helpers/fixtures.ts'

let db: Db
const t = useTestDb({ ready: (created) => (db = created.db) })

describe('definitions', () => {
  it('creates and reads back every field (scopes as JSON)', async () => {
    const slug = unique('quiz-night')
    const input = {
      slug,
      title: 'Quiz night',
      description: 'Every Friday',
      schedule: '0 20 * * 5',
      timezone: 'Europe/Berlin',
      graceSeconds: 120,
      concurrencyKey: 'world:{{run.scope}}',
      scopes: ['eu', 'us'],
      state: 'active' as const,
    }
    const id = await definitions.create(db, input)
    const def = await definitions.getById(db, id)
    // Every field as written, and no version or watermark yet.
    expect(def).toMatchObject({ id, ...input, currentVersionId: null, materialisedThrough: null })
    expect((await definitions.getBySlug(db, slug))?.id).toBe(id)
    expect(await definitions.getBySlug(db, 'no-such-slug')).toBeNull()
  })

  it('a duplicate slug is an error with errno 1062 (DB_ERRNO.DUP_ENTRY)', async () => {
    const { def } = await makeDefinition(db)
    const err = await definitions
      .create(db, {
        slug: def.slug,
        title: 'Other',
        timezone: 'UTC',
        graceSeconds: 60,
        scopes: [''],
        state: 'active',
      })
      .then(
        () => null,
        (e: unknown) => e,
      )
    expect(err).toBeInstanceOf(DatabaseError)
    expect((err as DatabaseError).errno).toBe(DB_ERRNO.DUP_ENTRY)
    expect(isDbErrno(err, 1062)).toBe(true)
    expect((err as DatabaseError).unavailable).toBe(false)
    // The message is safe to show: no SQL text.
    expect((err as Error).message).not.toMatch(/INSERT|event_definitions/i)
  })

  it('update resets materialized_through when schedule, timezone or scopes change, not for a title', async () => {
    const { def } = await makeDefinition(db, { schedule: '*/5 * * * *' })
    const mark = new Date(Date.UTC(2030, 0, 1, 12, 0, 0, 250))
    const watermark = async () =>
      (await definitions.getById(db, def.id))?.materialisedThrough?.getTime() ?? null
    const reset = async () => {
      await definitions.setWatermark(db, def.id, new Date(0)) // no-op once set: never moves backwards
      await db.run('UPDATE event_definitions SET materialized_through = NULL WHERE id = ?', [def.id])
      await definitions.setWatermark(db, def.id, mark)
      expect(await watermark()).toBe(mark.getTime())
    }

    await reset()
    expect(
      await definitions.update(db, def.id, { title: 'Renamed', description: 'new words', graceSeconds: 900 }),
    ).toBe(true)
    expect(await watermark()).toBe(mark.getTime())
    expect(await definitions.getById(db, def.id)).toMatchObject({
      title: 'Renamed',
      description: 'new words',
      graceSeconds: 900,
    })
    expect(await definitions.update(db, def.id, { concurrencyKey: 'k' })).toBe(true)
    expect(await watermark()).toBe(mark.getTime())

    expect(await definitions.update(db, def.id, { schedule: '0 * * * *' })).toBe(true)
    expect(await watermark()).toBeNull()
    await reset()
    expect(await definitions.update(db, def.id, { timezone: 'America/New_York' })).toBe(true)
    expect(await watermark()).toBeNull()
    await reset()
    expect(await definitions.update(db, def.id, { scopes: ['eu', 'us'] })).toBe(true)
    expect(await watermark()).toBeNull()
    expect((await definitions.getById(db, def.id))?.scopes).toEqual(['eu', 'us'])
    await reset()
    expect(await definitions.update(db, def.id, {})).toBe(true)
    expect(await watermark()).toBe(mark.getTime())

    // Found-with-equal-values is still "found"; a missing id is not.
    expect(await definitions.update(db, def.id, { title: 'Renamed' })).toBe(true)
    expect(await definitions.update(db, 999_999_999, { title: 'x' })).toBe(false)
    expect(await definitions.update(db, 999_999_999, {})).toBe(false)
  })

  it('setWatermark never moves backwards', async () => {
    const { def } = await makeDefinition(db)
    const t1 = new Date(Date.UTC(2030, 5, 1))
    await definitions.setWatermark(db, def.id, t1)
    await definitions.setWatermark(db, def.id, new Date(Date.UTC(2030, 0, 1)))
    expect((await definitions.getById(db, def.id))?.materialisedThrough?.getTime()).toBe(t1.getTime())
  })

  it('list hides archived definitions unless asked; listMaterialisable needs active + schedule + version', async () => {
    const scheduled = await makeDefinition(db, { schedule: '0 9 * * *', slug: unique('a-sched') })
    const manual = await makeDefinition(db, { schedule: null, slug: unique('b-manual') })
    const paused = await makeDefinition(db, {
      schedule: '0 9 * * *',
      state: 'paused',
      slug: unique('c-paused'),
    })
    const archived = await makeDefinition(db, { schedule: '0 9 * * *', slug: unique('d-arch') })
    expect(await definitions.setState(db, archived.def.id, 'archived')).toMatchObject({ applied: true })
    const noVersion = await definitions.create(db, {
      slug: unique('e-nover'),
      title: 'no version',
      schedule: '0 9 * * *',
      timezone: 'UTC',
      graceSeconds: 60,
      scopes: [''],
      state: 'active',
    })
    const visible = (await definitions.list(db)).map((d) => d.id)
    expect(visible).toEqual(
      expect.arrayContaining([scheduled.def.id, manual.def.id, paused.def.id, noVersion]),
    )
    expect(visible).not.toContain(archived.def.id)
    expect((await definitions.list(db, { includeArchived: true })).map((d) => d.id)).toContain(
      archived.def.id,
    )
    const mat = (await definitions.listMaterialisable(db)).map((d) => d.id)
    expect(mat).toContain(scheduled.def.id)
    for (const id of [manual.def.id, paused.def.id, archived.def.id, noVersion]) expect(mat).not.toContain(id)
  })
})

describe('versions', () => {
  it('publish numbers 1, 2, 3 and makes each current', async () => {
    const id = await definitions.create(db, {
      slug: unique('versioned'),
      title: 'v',
      timezone: 'UTC',
      graceSeconds: 60,
      scopes: [''],
      state: 'active',
    })
    const made = []
    for (let i = 1; i <= 3; i++) {
      const v = await versions.publish(db, id, { phases: [{ name: `p${i}`, steps: [] }] }, 'admin:alice')
      expect(v).toMatchObject({
        definitionId: id,
        version: i,
        createdBy: 'admin:alice',
        program: { phases: [{ name: `p${i}` }] },
      })
      expect((await definitions.getById(db, id))?.currentVersionId).toBe(v.id)
      made.push(v)
    }
    expect((await versions.listForDefinitions(db, [id])).map((v) => v.version)).toEqual([3, 2, 1])
    expect((await versions.getById(db, made[0]?.id as number))?.program).toEqual({
      phases: [{ name: 'p1', steps: [] }],
    })
  })

  it('concurrent publishes on one definition (separate pools) get distinct consecutive numbers', async () => {
    const { def } = await makeDefinition(db) // version 1 exists
    const pools = Array.from({ length: 6 }, () => t.open({ connectionLimit: 2 }))
    try {
      const published = await Promise.all(
        pools.flatMap((p, i) =>
          [0, 1].map((j) => versions.publish(p, def.id, { n: `${i}.${j}` }, `pool-${i}`)),
        ),
      )
      const numbers = published.map((v) => v.version).sort((a, b) => a - b)
      expect(numbers).toEqual(Array.from({ length: 12 }, (_, i) => i + 2))
      const all = await versions.listForDefinitions(db, [def.id])
      expect(all).toHaveLength(13)
      // The current version is the highest number.
      const current = (await definitions.getById(db, def.id))?.currentVersionId
      expect(all.find((v) => v.id === current)?.version).toBe(13)
    } finally {
      await Promise.all(pools.map((p) => p.close()))
    }
  })
})

describe('invariant 15: no archive while a run is in progress', () => {
  it('setState(archived) is refused while any run is starting/running/paused/ending; a scheduled one is cancelled', async () => {
    const fx = await makeDefinition(db)
    const run = await makeRun(db, { definition: fx, scheduledFor: at(-1000) })
    const done = await makeRun(db, { definition: fx, scheduledFor: at(-2000) })
    expect(await runs.transition(db, done.id, 'scheduled', 'missed')).toBe(true)

    const archiveRefused = async (status: RunStatus) => {
      expect(await runs.statusOf(db, run.id)).toBe(status)
      expect(await runs.countActiveForDefinition(db, fx.def.id)).toBe(1)
      expect(await definitions.setState(db, fx.def.id, 'archived')).toEqual({ applied: false, inProgress: 1 })
      expect((await definitions.getById(db, fx.def.id))?.state).toBe('active')
    }
    expect((await runs.claimStart(db, run, 'w', at(60_000))).claimed).toBe(true)
    await archiveRefused('starting')
    expect(await runs.transition(db, run.id, 'starting', 'running')).toBe(true)
    await archiveRefused('running')
    expect(await runs.transition(db, run.id, 'running', 'paused')).toBe(true)
    await archiveRefused('paused')
    expect(await runs.transition(db, run.id, 'paused', 'running')).toBe(true)
    expect(await runs.transition(db, run.id, 'running', 'ending')).toBe(true)
    await archiveRefused('ending')
    // A live run of ANOTHER definition does not matter.
    await makeRun(db)

    expect(await runs.transition(db, run.id, 'ending', 'completed')).toBe(true)
    expect(await runs.countActiveForDefinition(db, fx.def.id)).toBe(0)
    // A run a person scheduled does not block the archive: it is cancelled.
    const later = await makeRun(db, { definition: fx, scheduledFor: at(60_000), startedBy: 'admin#1' })
    expect(await definitions.setState(db, fx.def.id, 'archived')).toEqual({
      applied: true,
      withdrawn: 0,
      cancelled: 1,
    })
    expect((await definitions.getById(db, fx.def.id))?.state).toBe('archived')
    expect(await runs.getById(db, later.id)).toMatchObject({
      status: 'cancelled',
      lastError: 'definition archived',
    })
  })

  it('an archive racing the creation of a run waits for it and then withdraws it (another connection)', async () => {
    const fx = await makeDefinition(db)
    const other = t.open()
    let insert!: () => void
    const insertNow = new Promise<void>((resolve) => {
      insert = resolve
    })
    let checked!: () => void
    const stateChecked = new Promise<void>((resolve) => {
      checked = resolve
    })
    // Connection A does what materialisation and startRun do: check the state,
    // then insert. The archive is attempted between the two.
    const creator = db.transaction(async (tx) => {
      expect(await definitions.lockForNewRuns(tx, fx.def.id)).toBe('active')
      checked()
      await insertNow
      await runs.materialise(tx, newRun(fx, { scheduledFor: at(60_000), startedBy: 'schedule' }))
    })
    await stateChecked
    // Connection B: without the shared lock the archive would succeed here and
    // the run would then be inserted under an archived definition.
    let settled = false
    const archive = definitions.setState(other, fx.def.id, 'archived').then((applied) => {
      settled = true
      return applied
    })
    await new Promise((r) => setTimeout(r, 300))
    expect(settled).toBe(false)
    insert()
    await creator
    expect(await archive).toEqual({ applied: true, withdrawn: 1, cancelled: 0 })
    expect((await definitions.getById(db, fx.def.id))?.state).toBe('archived')
    expect(await runs.countActiveForDefinition(db, fx.def.id)).toBe(0)
  })

  it('pausing and re-activating are always allowed, and re-activating resets the watermark', async () => {
    const fx = await makeDefinition(db, { schedule: '0 9 * * *' })
    await makeRun(db, { definition: fx }) // a live run does not block pausing
    await definitions.setWatermark(db, fx.def.id, new Date(Date.UTC(2031, 0, 1)))
    expect(await definitions.setState(db, fx.def.id, 'paused')).toMatchObject({ applied: true })
    expect((await definitions.getById(db, fx.def.id))?.state).toBe('paused')
    expect(await definitions.setState(db, fx.def.id, 'active')).toMatchObject({ applied: true })
    expect(await definitions.getById(db, fx.def.id)).toMatchObject({
      state: 'active',
      materialisedThrough: null,
    })
  })
})
