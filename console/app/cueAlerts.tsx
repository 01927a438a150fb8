/**
 * Opt-in alerts for new cues that are mine: a browser notification and a
 * short chime (made with Web Audio, so no sound file is loaded). The choice
 * is kept per browser; nothing is asked until the person turns it on.
 */
import { useEffect, useRef, useState } from 'preact/hooks'
import { promptOf } from './format.ts'
import { reduceInbox } from './inboxState.ts'
import { useLive } from './live.ts'
import { INBOX_MINE, INBOX_MINE_CHANGES, type InboxData } from './operations.ts'

const KEY = 'showrunner.cueAlerts'

export function alertsWanted(): boolean {
  try {
    return localStorage.getItem(KEY) === 'on'
  } catch {
    return false
  }
}

export function setAlertsWanted(on: boolean): void {
  try {
    if (on) localStorage.setItem(KEY, 'on')
    else localStorage.removeItem(KEY)
  } catch {}
}

/** Two short tones. */
export function chime(): void {
  try {
    const Ctx =
      window.AudioContext ??
      (window as unknown as { webkitAudioContext?: typeof AudioContext }).webkitAudioContext
    if (!Ctx) return
    const ctx = new Ctx()
    const notes = [880, 1320]
    notes.forEach((freq, i) => {
      const osc = ctx.createOscillator()
      const gain = ctx.createGain()
      osc.frequency.value = freq
      const at = ctx.currentTime + i * 0.18
      gain.gain.setValueAtTime(0.0001, at)
      gain.gain.exponentialRampToValueAtTime(0.2, at + 0.02)
      gain.gain.exponentialRampToValueAtTime(0.0001, at + 0.16)
      osc.connect(gain).connect(ctx.destination)
      osc.start(at)
      osc.stop(at + 0.17)
    })
    setTimeout(() => void ctx.close(), 800)
  } catch {}
}

/** The toggle's state and switch: asks for notification permission when turned on. */
export function useAlertToggle(): [boolean, () => Promise<void>] {
  const [on, setOn] = useState(alertsWanted)
  async function toggle() {
    const next = !on
    if (next && typeof Notification !== 'undefined' && Notification.permission === 'default')
      await Notification.requestPermission().catch(() => 'denied')
    setAlertsWanted(next)
    setOn(next)
    dispatchEvent(new Event(KEY))
  }
  return [on, toggle]
}

function CueAlertWatcher({ token }: { token: string }) {
  const mine = useLive<InboxData>(token, INBOX_MINE, {
    subscription: { query: INBOX_MINE_CHANGES, reduce: reduceInbox },
  })
  const seen = useRef<Set<string> | null>(null)
  useEffect(() => {
    const cues = mine.data?.waitingSteps
    if (!cues) return
    const ids = new Set(cues.map((c) => c.id))
    // The first inbox is what was already waiting: only later cues are news.
    if (seen.current === null) {
      seen.current = ids
      return
    }
    const fresh = cues.filter((c) => !seen.current?.has(c.id))
    seen.current = ids
    if (fresh.length === 0) return
    chime()
    document.documentElement.dataset.cueAlerts = String(
      Number(document.documentElement.dataset.cueAlerts ?? 0) + fresh.length,
    )
    if (typeof Notification !== 'undefined' && Notification.permission === 'granted')
      for (const c of fresh)
        new Notification(`Cue: ${promptOf(c.params)}`, {
          body: `${c.run.definition.title}${c.cue?.assignees.length ? ` · for ${c.cue.assignees.join(', ')}` : ''}`,
          tag: `cue-${c.id}`,
        })
  }, [mine.data])
  return null
}

/** Mounted once by the shell: watches my cues while alerts are on in this browser. */
export function CueAlerts({ token }: { token: string }) {
  const [on, setOn] = useState(alertsWanted)
  useEffect(() => {
    const update = () => setOn(alertsWanted())
    addEventListener(KEY, update)
    // A toggle between the first render and this effect fired before anyone listened.
    update()
    return () => removeEventListener(KEY, update)
  }, [])
  return on ? <CueAlertWatcher token={token} /> : null
}
