import { Cron } from 'croner'
import { describe, expect, it } from 'vitest'
import { AppError } from '../src/errors.ts'
import {
  canonicalTimezone,
  nextOccurrences,
  occurrencesBetween,
  validateSchedule,
} from '../src/runner/schedule.ts'

const iso = (dates: Date[]) => dates.map((d) => d.toISOString())
const between = (cron: string, tz: string, from: string, to: string) =>
  iso(occurrencesBetween(cron, tz, new Date(from), new Date(to)))
const z = (s: string) => `${s}:00.000Z`

/** Local wall time `HH:MM` of an instant in a zone. */
function wall(d: Date, tz: string): string {
  return d.toLocaleTimeString('en-GB', { timeZone: tz, hour: '2-digit', minute: '2-digit', hourCycle: 'h23' })
}
function localDate(d: Date, tz: string): string {
  return d.toLocaleDateString('en-CA', { timeZone: tz })
}

// 2025 transitions:
// America/New_York     spring 2025-03-09 02:00 EST → 03:00 EDT (07:00Z); fall 2025-11-02 02:00 EDT → 01:00 EST (06:00Z)
// Europe/London        spring 2025-03-30 01:00 GMT → 02:00 BST (01:00Z); fall 2025-10-26 02:00 BST → 01:00 GMT (01:00Z)
// Australia/Lord_Howe  fall   2025-04-06 02:00 +11 → 01:30 +10:30 (04-05 15:00Z); spring 2025-10-05 02:00 +10:30 → 02:30 +11 (10-04 15:30Z)
// `start`/`end`: local midnight 3 days before and 4 days after the transition day.
const TRANSITIONS = [
  {
    tz: 'America/New_York',
    kind: 'spring',
    day: '2025-03-09',
    start: '2025-03-06T05:00:00Z',
    end: '2025-03-13T04:00:00Z',
  },
  {
    tz: 'America/New_York',
    kind: 'fall',
    day: '2025-11-02',
    start: '2025-10-30T04:00:00Z',
    end: '2025-11-06T05:00:00Z',
  },
  {
    tz: 'Europe/London',
    kind: 'spring',
    day: '2025-03-30',
    start: '2025-03-27T00:00:00Z',
    end: '2025-04-02T23:00:00Z',
  },
  {
    tz: 'Europe/London',
    kind: 'fall',
    day: '2025-10-26',
    start: '2025-10-22T23:00:00Z',
    end: '2025-10-30T00:00:00Z',
  },
  {
    tz: 'Australia/Lord_Howe',
    kind: 'fall',
    day: '2025-04-06',
    start: '2025-04-02T13:00:00Z',
    end: '2025-04-09T13:30:00Z',
  },
  {
    tz: 'Australia/Lord_Howe',
    kind: 'spring',
    day: '2025-10-05',
    start: '2025-10-01T13:30:00Z',
    end: '2025-10-08T13:00:00Z',
  },
] as const

describe('daily schedules across DST transitions', () => {
  it('America/New_York: a skipped 02:30 fires at 03:00 EDT, once', () => {
    expect(between('30 2 * * *', 'America/New_York', '2025-03-07T12:00:00Z', '2025-03-11T12:00:00Z')).toEqual(
      [
        z('2025-03-08T07:30'), // 02:30 EST
        z('2025-03-09T07:00'), // 02:30 does not exist: 03:00 EDT, the first instant after the jump
        z('2025-03-10T06:30'), // 02:30 EDT
        z('2025-03-11T06:30'),
      ],
    )
  })

  it('America/New_York: a repeated 01:30 fires at its first (EDT) occurrence only', () => {
    expect(between('30 1 * * *', 'America/New_York', '2025-10-31T12:00:00Z', '2025-11-04T12:00:00Z')).toEqual(
      [
        z('2025-11-01T05:30'),
        z('2025-11-02T05:30'), // 01:30 EDT; 01:30 EST (06:30Z) does not fire
        z('2025-11-03T06:30'),
        z('2025-11-04T06:30'),
      ],
    )
  })

  it('America/New_York: 02:30 is untouched by the fall-back', () => {
    expect(between('30 2 * * *', 'America/New_York', '2025-11-01T00:00:00Z', '2025-11-03T12:00:00Z')).toEqual(
      [z('2025-11-01T06:30'), z('2025-11-02T07:30'), z('2025-11-03T07:30')],
    )
  })

  it('Europe/London: 01:30 is skipped in March (→ 02:00 BST) and repeated in October (first one fires)', () => {
    expect(between('30 1 * * *', 'Europe/London', '2025-03-28T12:00:00Z', '2025-03-31T12:00:00Z')).toEqual([
      z('2025-03-29T01:30'),
      z('2025-03-30T01:00'), // 02:00 BST
      z('2025-03-31T00:30'),
    ])
    expect(between('30 1 * * *', 'Europe/London', '2025-10-24T12:00:00Z', '2025-10-27T12:00:00Z')).toEqual([
      z('2025-10-25T00:30'),
      z('2025-10-26T00:30'), // 01:30 BST; 01:30 GMT (01:30Z) does not fire
      z('2025-10-27T01:30'),
    ])
  })

  it('Australia/Lord_Howe: 30-minute shifts at 02:00', () => {
    const tz = 'Australia/Lord_Howe'
    // April: 01:30–02:00 happens twice; 01:45 fires at its first (+11) occurrence.
    expect(between('45 1 * * *', tz, '2025-04-03T16:00:00Z', '2025-04-06T16:00:00Z')).toEqual([
      z('2025-04-04T14:45'),
      z('2025-04-05T14:45'),
      z('2025-04-06T15:15'),
    ])
    // 02:00 itself exists once in April (right after the repeated half hour).
    expect(between('0 2 * * *', tz, '2025-04-03T16:00:00Z', '2025-04-06T16:00:00Z')).toEqual([
      z('2025-04-04T15:00'),
      z('2025-04-05T15:30'),
      z('2025-04-06T15:30'),
    ])
    // October: 02:00–02:30 is skipped; 02:00 and 02:15 fire at 02:30 +11 (15:30Z).
    expect(between('15 2 * * *', tz, '2025-10-02T16:00:00Z', '2025-10-05T16:00:00Z')).toEqual([
      z('2025-10-03T15:45'),
      z('2025-10-04T15:30'),
      z('2025-10-05T15:15'),
    ])
    expect(between('0 2 * * *', tz, '2025-10-02T16:00:00Z', '2025-10-05T16:00:00Z')).toEqual([
      z('2025-10-03T15:30'),
      z('2025-10-04T15:30'),
      z('2025-10-05T15:00'),
    ])
  })

  // Every wall time of the day, every 15 minutes, around every transition: each
  // local day fires exactly once, at the wall time, or right after a skipped one.
  for (const t of TRANSITIONS) {
    it(`${t.tz} ${t.kind} ${t.day}: every daily wall time fires once a day`, () => {
      // Just before local midnight to just before local midnight: 7 whole local days.
      const from = new Date(new Date(t.start).getTime() - 1000)
      const to = new Date(new Date(t.end).getTime() - 1000)
      expect(localDate(new Date(t.start), t.tz) < t.day).toBe(true)
      expect(wall(new Date(t.start), t.tz)).toBe('00:00')
      expect(wall(new Date(t.end), t.tz)).toBe('00:00')
      const expectedDays = Array.from({ length: 7 }, (_, i) =>
        new Date(Date.parse(`${localDate(new Date(t.start), t.tz)}T12:00:00Z`) + i * 86_400_000)
          .toISOString()
          .slice(0, 10),
      )
      for (let minutes = 0; minutes < 24 * 60; minutes += 15) {
        const hh = Math.floor(minutes / 60)
        const mm = minutes % 60
        const got = occurrencesBetween(`${mm} ${hh} * * *`, t.tz, from, to)
        const days = got.map((d) => localDate(d, t.tz))
        expect(days, `${hh}:${mm}`).toEqual(expectedDays)
        const target = `${String(hh).padStart(2, '0')}:${String(mm).padStart(2, '0')}`
        for (const d of got) {
          const w = wall(d, t.tz)
          if (w !== target) {
            // Only on the transition day, only for a skipped time, and never earlier than asked.
            expect(localDate(d, t.tz)).toBe(t.day)
            expect(t.kind).toBe('spring')
            expect(w > target).toBe(true)
            // ... and exactly at the jump: one second earlier shows a wall time before the target.
            expect(wall(new Date(d.getTime() - 1000), t.tz) < target).toBe(true)
          }
        }
      }
    })
  }
})

describe('every-30-minute schedules across DST transitions', () => {
  // Rule (docs/contract.md, "Schedules"): a wall time repeated by fall-back fires once, at its first
  // occurrence. It applies to every pattern, so `*/30` does NOT fire during the
  // second pass through the repeated hour: 01:00 and 01:30 fire once each.
  it('America/New_York fall: the repeated 01:00 and 01:30 fire only in EDT', () => {
    expect(
      between('*/30 * * * *', 'America/New_York', '2025-11-02T04:00:00Z', '2025-11-02T08:00:00Z'),
    ).toEqual([
      z('2025-11-02T04:30'), // 00:30 EDT
      z('2025-11-02T05:00'), // 01:00 EDT
      z('2025-11-02T05:30'), // 01:30 EDT
      // 06:00Z (01:00 EST) and 06:30Z (01:30 EST): repeated wall times, not fired
      z('2025-11-02T07:00'), // 02:00 EST
      z('2025-11-02T07:30'),
      z('2025-11-02T08:00'),
    ])
  })

  it('America/New_York spring: 02:00 and 02:30 collapse onto 03:00 EDT, fired once', () => {
    expect(
      between('*/30 * * * *', 'America/New_York', '2025-03-09T05:00:00Z', '2025-03-09T08:00:00Z'),
    ).toEqual([
      z('2025-03-09T05:30'), // 00:30 EST
      z('2025-03-09T06:00'),
      z('2025-03-09T06:30'), // 01:30 EST
      z('2025-03-09T07:00'), // 03:00 EDT
      z('2025-03-09T07:30'),
      z('2025-03-09T08:00'),
    ])
  })

  it('Europe/London both transitions', () => {
    expect(between('*/30 * * * *', 'Europe/London', '2025-03-29T23:00:00Z', '2025-03-30T03:00:00Z')).toEqual([
      z('2025-03-29T23:30'),
      z('2025-03-30T00:00'),
      z('2025-03-30T00:30'), // 00:30 GMT
      z('2025-03-30T01:00'), // 02:00 BST (01:00 and 01:30 GMT do not exist and land here)
      z('2025-03-30T01:30'),
      z('2025-03-30T02:00'),
      z('2025-03-30T02:30'),
      z('2025-03-30T03:00'),
    ])
    expect(between('*/30 * * * *', 'Europe/London', '2025-10-25T23:00:00Z', '2025-10-26T03:00:00Z')).toEqual([
      z('2025-10-25T23:30'), // 00:30 BST
      z('2025-10-26T00:00'), // 01:00 BST
      z('2025-10-26T00:30'), // 01:30 BST
      // 01:00Z and 01:30Z are 01:00 and 01:30 GMT again: not fired
      z('2025-10-26T02:00'), // 02:00 GMT
      z('2025-10-26T02:30'),
      z('2025-10-26T03:00'),
    ])
  })

  it('Australia/Lord_Howe both transitions (30-minute shift)', () => {
    const tz = 'Australia/Lord_Howe'
    expect(between('*/30 * * * *', tz, '2025-04-05T13:00:00Z', '2025-04-05T16:30:00Z')).toEqual([
      z('2025-04-05T13:30'), // 00:30 +11
      z('2025-04-05T14:00'),
      z('2025-04-05T14:30'), // 01:30 +11
      // 15:00Z is 01:30 +10:30, the repeat: not fired
      z('2025-04-05T15:30'), // 02:00 +10:30
      z('2025-04-05T16:00'),
      z('2025-04-05T16:30'),
    ])
    expect(between('*/30 * * * *', tz, '2025-10-04T13:30:00Z', '2025-10-04T17:00:00Z')).toEqual([
      z('2025-10-04T14:00'), // 00:30 +10:30
      z('2025-10-04T14:30'),
      z('2025-10-04T15:00'), // 01:30 +10:30
      z('2025-10-04T15:30'), // 02:30 +11 (02:00 does not exist and lands here)
      z('2025-10-04T16:00'),
      z('2025-10-04T16:30'),
      z('2025-10-04T17:00'),
    ])
  })

  it('every minute across each transition: strictly increasing, each local minute once', () => {
    for (const t of TRANSITIONS) {
      const from = new Date(`${t.day}T00:00:00Z`)
      from.setUTCDate(from.getUTCDate() - 1)
      const to = new Date(from.getTime() + 2 * 86_400_000)
      const got = occurrencesBetween('* * * * *', t.tz, from, to)
      for (let i = 1; i < got.length; i++) expect(got[i]!.getTime()).toBeGreaterThan(got[i - 1]!.getTime())
      const walls = got.map((d) => d.toLocaleString('en-GB', { timeZone: t.tz }))
      expect(new Set(walls).size).toBe(walls.length)
      const minutes = (to.getTime() - from.getTime()) / 60_000
      const shift = t.tz === 'Australia/Lord_Howe' ? 30 : 60
      // Fall-back: the repeated minutes fire once. Spring: every real minute has one wall time.
      expect(got.length).toBe(t.kind === 'fall' ? minutes - shift : minutes)
    }
  })

  it('croner 11 on its own fires interval patterns twice in a repeated hour (why schedule.ts maps wall times itself)', () => {
    const runs = new Cron('*/30 * * * *', { timezone: 'America/New_York' }).nextRuns(
      6,
      new Date('2025-11-02T04:00:00Z'),
    )
    expect(iso(runs)).toEqual([
      z('2025-11-02T04:30'),
      z('2025-11-02T05:00'),
      z('2025-11-02T05:30'),
      z('2025-11-02T06:00'),
      z('2025-11-02T06:30'),
      z('2025-11-02T07:00'),
    ])
    // ... and agrees with the rule for fixed-time patterns.
    expect(
      iso(
        new Cron('30 2 * * *', { timezone: 'America/New_York' }).nextRuns(
          1,
          new Date('2025-03-09T00:00:00Z'),
        ),
      ),
    ).toEqual([z('2025-03-09T07:00')])
  })

  it('an hourly :30 fires at the jump when its wall time is skipped', () => {
    expect(between('30 * * * *', 'America/New_York', '2025-03-09T05:00:00Z', '2025-03-09T09:00:00Z')).toEqual(
      [
        z('2025-03-09T05:30'), // 00:30 EST
        z('2025-03-09T06:30'), // 01:30 EST
        z('2025-03-09T07:00'), // 02:30 does not exist: 03:00 EDT
        z('2025-03-09T07:30'), // 03:30 EDT
        z('2025-03-09T08:30'),
      ],
    )
  })
})

describe('nextOccurrences / occurrencesBetween', () => {
  it('supports 6-field (seconds) patterns', () => {
    const got = nextOccurrences('*/20 * * * * *', 'UTC', {
      after: new Date('2025-06-01T12:00:00Z'),
      count: 4,
    })
    expect(iso(got)).toEqual([
      '2025-06-01T12:00:20.000Z',
      '2025-06-01T12:00:40.000Z',
      '2025-06-01T12:01:00.000Z',
      '2025-06-01T12:01:20.000Z',
    ])
    // A skipped 02:30:15 fires at the jump too.
    expect(
      iso(
        nextOccurrences('15 30 2 * * *', 'America/New_York', {
          after: new Date('2025-03-08T12:00:00Z'),
          count: 2,
        }),
      ),
    ).toEqual([z('2025-03-09T07:00'), '2025-03-10T06:30:15.000Z'])
  })

  it('is exclusive of `after` / `from` and inclusive of `to`', () => {
    const after = new Date('2025-06-01T09:00:00Z')
    expect(iso(nextOccurrences('0 9 * * *', 'UTC', { after, count: 1 }))).toEqual([z('2025-06-02T09:00')])
    expect(between('0 9 * * *', 'UTC', '2025-06-01T09:00:00Z', '2025-06-02T09:00:00Z')).toEqual([
      z('2025-06-02T09:00'),
    ])
    expect(between('0 9 * * *', 'UTC', '2025-06-02T09:00:00Z', '2025-06-02T09:00:00Z')).toEqual([])
  })

  it('honours max and count', () => {
    expect(occurrencesBetween('* * * * *', 'UTC', new Date(0), new Date(86_400_000), 10)).toHaveLength(10)
    expect(nextOccurrences('* * * * *', 'Europe/Paris', { after: new Date(), count: 1000 })).toHaveLength(
      1000,
    )
  })

  it('is fast enough for dense schedules over a day', () => {
    const started = performance.now()
    const got = occurrencesBetween(
      '* * * * * *',
      'Europe/Berlin',
      new Date('2025-06-01T00:00:00Z'),
      new Date('2025-06-02T00:00:00Z'),
    )
    expect(got).toHaveLength(10_000)
    expect(performance.now() - started).toBeLessThan(2000)
  })

  it('uses day-of-week in the zone, not in UTC', () => {
    // Monday 00:30 in Tokyo is Sunday 15:30Z.
    expect(
      iso(
        nextOccurrences('30 0 * * MON', 'Asia/Tokyo', { after: new Date('2025-06-01T00:00:00Z'), count: 1 }),
      ),
    ).toEqual([z('2025-06-01T15:30')])
  })

  it('rejects count out of range and bad input with BAD_USER_INPUT', () => {
    const after = new Date()
    for (const count of [0, 1001, 1.5]) {
      expect(() => nextOccurrences('* * * * *', 'UTC', { after, count })).toThrow(
        /count must be an integer from 1 to 1000/,
      )
    }
    let err: unknown
    try {
      nextOccurrences('* * *', 'Mars/Base', { after, count: 1 })
    } catch (e) {
      err = e
    }
    expect(err).toBeInstanceOf(AppError)
    expect((err as AppError).code).toBe('BAD_USER_INPUT')
    expect((err as AppError).message).toMatch(/has 3 fields.*Unknown time zone "Mars\/Base"/)
    expect((err as AppError).details?.problems).toHaveLength(2)
  })
})

describe('validateSchedule', () => {
  it('accepts 5- and 6-field patterns, names and nicknames in a known zone', () => {
    expect(validateSchedule('30 2 * * *', 'America/New_York')).toEqual([])
    expect(validateSchedule('0 */5 * * * *', 'UTC')).toEqual([])
    expect(validateSchedule('0 9 * JAN-MAR MON-FRI', 'Europe/London')).toEqual([])
    expect(validateSchedule('@daily', 'Australia/Lord_Howe')).toEqual([])
  })

  it('explains bad patterns', () => {
    expect(validateSchedule('* * *', 'UTC')).toEqual([
      '"* * *" has 3 fields: a schedule is 5 fields (minute hour day-of-month month day-of-week) or 6 (seconds first).',
    ])
    expect(validateSchedule('0 0 0 1 1 * 2030', 'UTC')[0]).toMatch(/has 7 fields/)
    expect(validateSchedule('61 * * * *', 'UTC')[0]).toMatch(
      /^"61 \* \* \* \*" is not a valid cron expression: .*minute.*61/,
    )
    expect(validateSchedule('*/0 * * * *', 'UTC')[0]).toMatch(/is not a valid cron expression/)
    expect(validateSchedule('', 'UTC')[0]).toMatch(/empty/)
    expect(validateSchedule('2025-01-01T00:00:00', 'UTC')[0]).toMatch(/not a date/)
    expect(validateSchedule('0 0 30 2 *', 'UTC')).toEqual(['"0 0 30 2 *" never fires (no date matches it).'])
  })

  it('explains unknown zones', () => {
    expect(validateSchedule('* * * * *', 'Mars/Olympus_Mons')).toEqual([
      'Unknown time zone "Mars/Olympus_Mons": use an IANA name such as "UTC", "Europe/London" or "America/New_York".',
    ])
    expect(validateSchedule('* * * * *', '')).toHaveLength(1)
    expect(validateSchedule('bad', 'Nowhere/Else')).toHaveLength(2)
  })

  it('canonicalises zone spelling', () => {
    expect(canonicalTimezone('america/new_york')).toBe('America/New_York')
    expect(canonicalTimezone('Nowhere/Else')).toBeNull()
    // The IANA name a person chose, not ICU's older id for it.
    expect(canonicalTimezone('Asia/Kolkata')).toBe('Asia/Kolkata')
    expect(canonicalTimezone('Europe/Kyiv')).toBe('Europe/Kyiv')
    expect(canonicalTimezone('US/Eastern')).toBe('US/Eastern')
    // Written carelessly, an alias takes ICU's id (a spelling known to be right).
    expect(canonicalTimezone('asia/kolkata')).toBe('Asia/Calcutta')
    expect(canonicalTimezone('utc')).toBe('UTC')
  })
})
