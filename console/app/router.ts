/** Hash routes, so the server serves one page and links work without it. */
import { useEffect, useState } from 'preact/hooks'

export type Route =
  | { page: 'board' }
  | { page: 'inbox' }
  | { page: 'standby' }
  | { page: 'run'; id: string }
  | { page: 'runs'; query: string }
  | { page: 'definitions' }
  | { page: 'newShow' }
  | { page: 'definition'; id: string }
  | { page: 'keys' }
  | { page: 'channels' }
  | { page: 'notFound'; path: string }

export function parseRoute(hash: string): Route {
  const [path = '/', query = ''] = (hash.replace(/^#/, '') || '/').split('?', 2)
  if (path === '/' || path === '/board') return { page: 'board' }
  if (path === '/inbox') return { page: 'inbox' }
  if (path === '/standby') return { page: 'standby' }
  if (path === '/runs') return { page: 'runs', query }
  if (path === '/definitions/new') return { page: 'newShow' }
  if (path === '/definitions') return { page: 'definitions' }
  if (path === '/keys') return { page: 'keys' }
  if (path === '/channels') return { page: 'channels' }
  const run = /^\/runs\/(\d+)$/.exec(path)
  if (run) return { page: 'run', id: run[1] as string }
  const def = /^\/definitions\/(\d+)$/.exec(path)
  if (def) return { page: 'definition', id: def[1] as string }
  return { page: 'notFound', path }
}

export function useRoute(): Route {
  const [route, setRoute] = useState(() => parseRoute(location.hash))
  useEffect(() => {
    const onChange = () => setRoute(parseRoute(location.hash))
    addEventListener('hashchange', onChange)
    // Effects run after the first paint: an address changed between the
    // first render and now fired its event before anyone listened.
    onChange()
    return () => removeEventListener('hashchange', onChange)
  }, [])
  return route
}

export function go(path: string): void {
  location.hash = path
}
