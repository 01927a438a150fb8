/**
 * The operator console. Signs in with a token (kept in sessionStorage, for
 * this tab only), learns the token's role from `viewer`, and shows only the
 * controls that role may use. Everything it knows comes over GraphQL.
 */

import { CueAlerts } from './cueAlerts.tsx'
import { Channels } from './pages/Channels.tsx'
import './style.css'
import { render } from 'preact'
import { useCallback, useEffect, useRef, useState } from 'preact/hooks'
import { closeSubscriptions, gql, onUnauthenticated, storedToken, storedViewer, storeToken } from './api.ts'
import { readableText } from './format.ts'
import {
  beginSso,
  finishSso,
  SIGNED_IN_VIEWER,
  type SignedInViewerData,
  type SsoConfig,
  ssoConfig,
} from './identity.ts'
import { Board } from './pages/Board.tsx'
import { DefinitionPage, Definitions } from './pages/Definitions.tsx'
import { focusOldestCue, Inbox, useInbox } from './pages/Inbox.tsx'
import { Keys } from './pages/Keys.tsx'
import { NewShow } from './pages/NewShow.tsx'
import { RunPage } from './pages/Run.tsx'
import { Runs } from './pages/Runs.tsx'
import { Standby } from './pages/Standby.tsx'
import { go, type Route, useRoute } from './router.ts'
import { can, type Session, SessionContext } from './session.ts'
import { normaliseToken, refusalText } from './signIn.ts'
import { UndoToasts, useUndoQueue } from './undo.tsx'

const SHORTCUTS: [string, string][] = [
  ['b', 'Board'],
  ['i', 'Cue inbox'],
  ['s', 'Stand-by'],
  ['r', 'Runs'],
  ['d', 'Definitions'],
  ['a', 'Answer the oldest cue'],
  ['?', 'Show or hide these shortcuts'],
]

function SignIn({
  onSignedIn,
  problem,
}: {
  onSignedIn: (token: string, v: SignedInViewerData['viewer']) => void
  problem: string | null
}) {
  const [token, setToken] = useState('')
  const [error, setError] = useState<string | null>(problem)
  const [busy, setBusy] = useState(false)
  const [shown, setShown] = useState(false)
  const [sso, setSso] = useState<SsoConfig | null>(null)
  useEffect(() => {
    void ssoConfig().then(setSso)
  }, [])
  return (
    <main id="main" class="signin">
      <h1>showrunner console</h1>
      <form
        onSubmit={async (e) => {
          e.preventDefault()
          setBusy(true)
          setError(null)
          const credential = normaliseToken(token)
          try {
            const data = await gql(credential, SIGNED_IN_VIEWER)
            onSignedIn(credential, data.viewer)
          } catch (err) {
            setError(refusalText(err))
          } finally {
            setBusy(false)
          }
        }}
      >
        <label for="token">Access token</label>
        {shown ? (
          <input
            id="token"
            name="token"
            type="text"
            autocomplete="off"
            spellcheck={false}
            required
            value={token}
            onInput={(e) => setToken((e.target as HTMLInputElement).value)}
            aria-describedby="token-help"
          />
        ) : (
          <input
            id="token"
            name="token"
            type="password"
            autocomplete="current-password"
            required
            value={token}
            onInput={(e) => setToken((e.target as HTMLInputElement).value)}
            aria-describedby="token-help"
          />
        )}
        <label class="small">
          <input
            type="checkbox"
            checked={shown}
            onChange={(e) => setShown((e.target as HTMLInputElement).checked)}
          />{' '}
          Show what I pasted
        </label>
        <p id="token-help" class="muted small">
          An API key, a token from SHOWRUNNER_TOKENS, or the one the server printed at start; the whole
          "Authorization: Bearer …" line is fine too. It stays in this tab only.
        </p>
        {error && (
          <p class="error" role="alert">
            {error}
          </p>
        )}
        <button type="submit" class="primary" disabled={busy || normaliseToken(token) === ''}>
          Sign in
        </button>
      </form>
      {sso && (
        <div class="sso">
          <p class="muted small">or</p>
          <button
            type="button"
            class="primary"
            onClick={() =>
              beginSso(sso).catch((err) => setError(err instanceof Error ? err.message : String(err)))
            }
          >
            Sign in with SSO
          </button>
        </div>
      )}
    </main>
  )
}

function Page({ route, inbox }: { route: Route; inbox: ReturnType<typeof useInbox> }) {
  switch (route.page) {
    case 'board':
      return <Board />
    case 'inbox':
      return <Inbox inbox={inbox} />
    case 'standby':
      return <Standby />
    case 'run':
      return <RunPage id={route.id} />
    case 'runs':
      return <Runs query={route.query} />
    case 'definitions':
      return <Definitions />
    case 'definition':
      return <DefinitionPage id={route.id} />
    case 'newShow':
      return <NewShow />
    case 'keys':
      return <Keys />
    case 'channels':
      return <Channels />
    default:
      return (
        <>
          <h1>Not found</h1>
          <p>
            Nothing lives at {route.path}. <a href="#/">Back to the board</a>.
          </p>
        </>
      )
  }
}

const PAGE_TITLES: Record<Route['page'], string> = {
  board: 'Board',
  inbox: 'Cue inbox',
  standby: 'Stand-by',
  run: 'Run',
  runs: 'Runs',
  definitions: 'Definitions',
  definition: 'Definition',
  newShow: 'New show',
  keys: 'API keys',
  channels: 'Notification channels',
  notFound: 'Not found',
}

function typing(target: EventTarget | null): boolean {
  const el = target as HTMLElement | null
  return !!el && (el.isContentEditable || ['INPUT', 'TEXTAREA', 'SELECT'].includes(el.tagName))
}

function Shell({ session, onSignOut }: { session: Session; onSignOut: () => void }) {
  const route = useRoute()
  const inbox = useInbox()
  const [help, setHelp] = useState(false)
  const mainRef = useRef<HTMLElement>(null)
  const waiting = inbox.data?.waitingSteps.length
  const active =
    route.page === 'run'
      ? 'runs'
      : route.page === 'definition' || route.page === 'newShow'
        ? 'definitions'
        : route.page

  useEffect(() => {
    document.title = `${PAGE_TITLES[route.page]}${waiting ? ` (${waiting} cue${waiting === 1 ? '' : 's'})` : ''} · showrunner`
  }, [route.page, waiting])

  useEffect(() => {
    const onKey = (e: KeyboardEvent) => {
      if (e.key === 'Escape' && typing(e.target)) {
        ;(e.target as HTMLElement).blur()
        return
      }
      if (e.ctrlKey || e.metaKey || e.altKey || typing(e.target)) return
      const target: Record<string, string> = {
        b: '/',
        i: '/inbox',
        s: '/standby',
        r: '/runs',
        d: '/definitions',
      }
      const path = target[e.key]
      if (path) {
        e.preventDefault()
        go(path)
        mainRef.current?.focus()
      } else if (e.key === 'a') {
        e.preventDefault()
        go('/inbox')
        focusOldestCue()
      } else if (e.key === '?') {
        setHelp((h) => !h)
      }
    }
    addEventListener('keydown', onKey)
    return () => removeEventListener('keydown', onKey)
  }, [])

  const link = (page: string, href: string, label: string, extra?: preact.ComponentChildren) => (
    <li>
      <a href={href} aria-current={active === page ? 'page' : undefined}>
        {label}
        {extra}
      </a>
    </li>
  )
  return (
    <>
      {/* A button, not a link: "#main" would be read as a route. */}
      <button type="button" class="skip-link" onClick={() => mainRef.current?.focus()}>
        Skip to content
      </button>
      <CueAlerts token={session.token} />
      <header class="top">
        <span class="brand">showrunner</span>
        <nav aria-label="Pages">
          <ul>
            {link('board', '#/', 'Board')}
            {link(
              'inbox',
              '#/inbox',
              'Inbox',
              waiting ? (
                <>
                  <span class="count" aria-hidden="true" data-testid="inbox-count">
                    {waiting}
                  </span>
                  <span class="visually-hidden"> ({waiting} waiting)</span>
                </>
              ) : null,
            )}
            {link('standby', '#/standby', 'Stand-by')}
            {link('runs', '#/runs', 'Runs')}
            {link('definitions', '#/definitions', 'Definitions')}
            {can(session, 'ADMIN') && link('keys', '#/keys', 'API keys')}
            {can(session, 'ADMIN') && link('channels', '#/channels', 'Channels')}
          </ul>
        </nav>
        <div class="who">
          <span class="name" data-testid="who">
            {session.name ?? session.actor}
          </span>
          <span class="role" data-testid="role" title={session.actor}>
            {session.role.toLowerCase()}
          </span>
          <button
            type="button"
            class="kbd-hint"
            onClick={() => setHelp((h) => !h)}
            aria-expanded={help}
            aria-controls="shortcuts"
          >
            Keys
          </button>
          <button type="button" onClick={onSignOut}>
            Sign out
          </button>
        </div>
      </header>
      {help && (
        <aside id="shortcuts" class="shortcuts" aria-label="Keyboard shortcuts">
          <dl>
            {SHORTCUTS.map(([k, what]) => (
              <div key={k}>
                <dt>
                  <kbd>{k}</kbd>
                </dt>
                <dd>{what}</dd>
              </div>
            ))}
          </dl>
        </aside>
      )}
      <main id="main" ref={mainRef} tabIndex={-1}>
        <Page route={route} inbox={inbox} />
      </main>
    </>
  )
}

function App() {
  // A reload renders at once with the role remembered at sign-in; the server re-confirms it below.
  const [signedIn, setSignedIn] = useState<
    ({ token: string } & Pick<Session, 'role' | 'actor' | 'name' | 'teams'>) | null
  >(() => {
    const token = storedToken()
    const viewer = storedViewer<SignedInViewerData['viewer']>()
    return token && viewer ? { token, ...viewer } : null
  })
  const [checking, setChecking] = useState(() => storedToken() !== null && signedIn === null)
  const [problem, setProblem] = useState<string | null>(null)
  const [toast, setToast] = useState<{ message: string; kind: 'ok' | 'error'; n: number } | null>(null)

  const signOut = useCallback((why: string | null) => {
    storeToken(null)
    closeSubscriptions()
    setSignedIn(null)
    setProblem(why)
  }, [])

  useEffect(() => {
    onUnauthenticated(() => signOut('The server no longer accepts this token; sign in again.'))
    // Back from the identity provider: exchange the code, then sign in as anyone would.
    if (/[?&](code|error)=/.test(location.search)) {
      setChecking(true)
      finishSso()
        .then((ssoToken) => {
          if (!ssoToken) return setChecking(false)
          // Kept like a pasted token (this tab only); the viewer check below names the person.
          storeToken(ssoToken)
          return confirmViewer(ssoToken)
        })
        .catch((err: unknown) => {
          setProblem(err instanceof Error ? err.message : String(err))
          setChecking(false)
        })
      return
    }
    const token = storedToken()
    if (!token) return
    // Rendered already from the remembered role: confirm it once the page has settled.
    const confirmAfterMs = signedIn ? 1000 : 0
    const confirm = setTimeout(() => {
      // A sign-out in the meantime cancels the check rather than signing back in.
      if (storedToken() === token) void confirmViewer(token)
      else setChecking(false)
    }, confirmAfterMs)
    return () => clearTimeout(confirm)
  }, [signOut])

  function confirmViewer(token: string) {
    return gql(token, SIGNED_IN_VIEWER)
      .then((d) => {
        // Signed out (or in with another token) while this was on its way: its answer is stale.
        if (storedToken() !== token) return
        storeToken(token, d.viewer)
        setSignedIn((prev) =>
          prev?.token === token && prev.role === d.viewer.role && prev.name === d.viewer.name
            ? prev
            : { token, ...d.viewer },
        )
      })
      .catch((err) => setProblem(err instanceof Error ? err.message : String(err)))
      .finally(() => setChecking(false))
  }

  useEffect(() => {
    if (!toast) return
    const t = setTimeout(() => setToast(null), 6000)
    return () => clearTimeout(t)
  }, [toast])

  const notify = useCallback((message: string, kind: 'ok' | 'error' = 'ok') => {
    // A refusal may quote an instant ("… is not an occurrence …"): in the viewer's zone, named.
    setToast((prev) => ({ message: readableText(message), kind, n: (prev?.n ?? 0) + 1 }))
  }, [])
  const undoQueue = useUndoQueue(
    useCallback((label: string) => notify(`Undone: ${label.toLowerCase()} was not sent.`), [notify]),
  )
  const later = undoQueue.later

  let body: preact.ComponentChildren
  if (checking)
    body = (
      <main id="main">
        <p aria-busy="true">Signing in…</p>
      </main>
    )
  else if (!signedIn)
    body = (
      <SignIn
        problem={problem}
        onSignedIn={(token, viewer) => {
          storeToken(token, viewer)
          setProblem(null)
          setSignedIn({ token, ...viewer })
        }}
      />
    )
  else
    body = (
      <SessionContext.Provider value={{ ...signedIn, notify, later }}>
        <Shell session={{ ...signedIn, notify, later }} onSignOut={() => signOut(null)} />
      </SessionContext.Provider>
    )
  return (
    <>
      {body}
      <UndoToasts queue={undoQueue} />
      <div class={`toast${toast ? ` ${toast.kind}` : ''}`} role="status" aria-live="polite">
        {toast?.message}
      </div>
    </>
  )
}

const root = document.getElementById('app')
if (root) {
  root.textContent = ''
  render(<App />, root)
}
