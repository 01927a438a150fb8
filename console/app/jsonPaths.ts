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
}

export function jsonPlaces(text: string): Map<string, Place> {
  const places = new Map<string, number>()
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
    if (!places.has(path)) places.set(path, at >= 0 ? at : i)
    const c = text[i]
    if (c === '{') {
      i++
      ws()
      while (i < text.length && text[i] !== '}') {
        ws()
        const keyAt = i
        const key = str()
        ws()
        i++ // ':'
        value(path === '' ? key : `${path}.${key}`, keyAt)
        ws()
        if (text[i] === ',') i++
        ws()
      }
      i++
    } else if (c === '[') {
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
  }
  value('', 0)
  const out = new Map<string, Place>()
  for (const [path, offset] of places) out.set(path, { offset, line: lineOf(text, offset) })
  return out
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
