/**
 * Raw HTTP over a TCP socket (node:net), for requests no well-behaved client
 * would send: malformed request lines, hosts and bodies.
 */
import { connect } from 'node:net'

export interface RawAnswer {
  /** The status code of the first response line, or null when the socket closed without one. */
  status: number | null
  text: string
}

/** The length of the first response in `text` once it is whole (head and content-length body), else null. */
export function wholeResponseLength(text: string): number | null {
  const head = text.indexOf('\r\n\r\n')
  const len = /content-length: (\d+)/i.exec(text)
  if (head < 0 || !len) return null
  const whole = head + 4 + Number(len[1])
  return text.length >= whole ? whole : null
}

/** Send `request` verbatim; answer what came back before the socket closed (or `timeoutMs` passed). */
export function rawRequest(url: string, request: string, timeoutMs = 3000): Promise<RawAnswer> {
  const { hostname, port } = new URL(url)
  return new Promise((resolve) => {
    const socket = connect(Number(port), hostname)
    let text = ''
    const done = () => {
      clearTimeout(timer)
      socket.destroy()
      const m = /^HTTP\/1\.[01] (\d{3})/.exec(text)
      resolve({ status: m ? Number(m[1]) : null, text })
    }
    const timer = setTimeout(done, timeoutMs)
    socket.on('data', (d) => {
      text += d.toString('latin1')
      // One response is all these requests get; stop once it is whole.
      if (wholeResponseLength(text) !== null) done()
    })
    socket.on('error', done)
    socket.on('close', done)
    socket.write(request, 'latin1')
  })
}
