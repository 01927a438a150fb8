/**
 * Where each value of a JSON text starts, by the path the server names it
 * with (`phases[0].steps[1].params.url`), so a problem at a path can be shown
 * at its line and the editor can put the cursor there. A small recursive
 * descent over text that `JSON.parse` already accepted; it never throws (a
 * text it cannot follow answers what it found so far).
 */

export interface Place {
  /** Offset of the value (or of its key, for an object member) in the text. */
  offset: number
  /** 1-based line of `offset`. */
  line: number
  /** Where the value itself starts and ends (end exclusive). */
  valueStart: number
  end: number
  type: 'object' | 'array' | 'value'
  /** An object's keys, as written. */
  keys?: string[]
}

type Found = Omit<Place, 'line'>

export function jsonPlaces(text: string): Map<string, Place> {
  const places = new Map<string, Found>()
  let i = 0
  const ws = () => {
    while (i < text.length && ' \t\n\r'.includes(text[i] as string)) i++
  }
  const str = (): string => {
    const start = i
    i++
    while (i < text.length && text[i] !== '"') i += text[i] === '\\' ? 2 : 1
    i++
    try {
      return JSON.parse(text.slice(start, i)) as string
    } catch {
      return ''
    }
  }
  const value = (path: string, at: number): void => {
    ws()
    const found: Found = { offset: at >= 0 ? at : i, valueStart: i, end: i, type: 'value' }
    const first = !places.has(path)
    if (first) places.set(path, found)
    const c = text[i]
    if (c === '{') {
      found.type = 'object'
      found.keys = []
      i++
      ws()
      while (i < text.length && text[i] !== '}') {
        ws()
        const keyAt = i
        const key = str()
        found.keys.push(key)
        ws()
        i++ // ':'
        value(path === '' ? key : `${path}.${key}`, keyAt)
        ws()
        if (text[i] === ',') i++
        ws()
      }
      i++
    } else if (c === '[') {
      found.type = 'array'
      i++
      ws()
      let n = 0
      while (i < text.length && text[i] !== ']') {
        value(`${path}[${n++}]`, -1)
        ws()
        if (text[i] === ',') i++
        ws()
      }
      i++
    } else if (c === '"') str()
    else while (i < text.length && !',}] \t\n\r'.includes(text[i] as string)) i++
    found.end = i
  }
  value('', 0)
  const out = new Map<string, Place>()
  for (const [path, f] of places) out.set(path, { ...f, line: lineOf(text, f.offset) })
  return out
}

/** The innermost object whose braces hold `cursor`: its path ('' for the program) and place. */
export function objectAt(places: Map<string, Place>, cursor: number): { path: string; place: Place } | null {
  let best: { path: string; place: Place } | null = null
  for (const [path, place] of places) {
    if (place.type !== 'object' || cursor <= place.valueStart || cursor >= place.end) continue
    if (!best || place.valueStart >= best.place.valueStart) best = { path, place }
  }
  return best
}

function lineOf(text: string, offset: number): number {
  let line = 1
  for (let k = 0; k < offset && k < text.length; k++) if (text.charCodeAt(k) === 10) line++
  return line
}

/**
 * The place of `path`, or of its nearest ancestor that is written (a missing
 * `params.prompt` is shown at `params`); null for the whole program.
 */
export function placeOf(places: Map<string, Place>, path: string): Place | null {
  let p = path === 'program' ? '' : path
  while (p !== '') {
    const found = places.get(p)
    if (found) return found
    const cut = Math.max(p.lastIndexOf('.'), p.lastIndexOf('['))
    p = cut > 0 ? p.slice(0, cut) : ''
  }
  return null
}
