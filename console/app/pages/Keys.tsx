/** API keys (admins): who holds which, when each was last used; make one (its secret shown once), revoke one. */
import { useState } from 'preact/hooks'
import { ApiError, gql } from '../api.ts'
import { API_KEYS, type ApiKeysData, CREATE_API_KEY, REVOKE_API_KEY } from '../identity.ts'
import { useLive, useNow } from '../live.ts'
import type { Role } from '../operations.ts'
import { can, useSession } from '../session.ts'
import { ActionButton, Ago, At, ErrorNote, Loading, Section, ZoneNote } from '../ui.tsx'

function CreateKey({ onCreated }: { onCreated: () => Promise<void> }) {
  const session = useSession()
  const [name, setName] = useState('')
  const [role, setRole] = useState<Role>('OPERATOR')
  const [teams, setTeams] = useState('')
  const [expires, setExpires] = useState('')
  const [made, setMade] = useState<{ name: string; secret: string } | null>(null)
  const [error, setError] = useState<string | null>(null)
  return (
    <Section title="New key" id="new-key">
      <form
        class="keyform"
        onSubmit={async (e) => {
          e.preventDefault()
          setError(null)
          try {
            const data = await gql(session.token, CREATE_API_KEY, {
              name: name.trim(),
              role,
              teams: teams
                .split(',')
                .map((t) => t.trim())
                .filter((t) => t !== ''),
              // datetime-local is the viewer's local time; the API takes an instant.
              expiresAt: expires ? new Date(expires).toISOString() : null,
            })
            setMade({ name: data.createApiKey.key.name, secret: data.createApiKey.secret })
            setName('')
            setTeams('')
            setExpires('')
            session.notify(`Key for ${data.createApiKey.key.name} made.`)
            await onCreated()
          } catch (err) {
            setError(err instanceof ApiError ? err.message : String(err))
          }
        }}
      >
        <label for="key-name">Name (the person or service holding it)</label>
        <input
          id="key-name"
          required
          value={name}
          onInput={(e) => setName((e.target as HTMLInputElement).value)}
        />
        <label for="key-role">Role</label>
        <select
          id="key-role"
          value={role}
          onChange={(e) => setRole((e.target as HTMLSelectElement).value as Role)}
        >
          <option value="VIEWER">viewer</option>
          <option value="OPERATOR">operator</option>
          <option value="ADMIN">admin</option>
        </select>
        <label for="key-teams">Teams (comma-separated, optional)</label>
        <input id="key-teams" value={teams} onInput={(e) => setTeams((e.target as HTMLInputElement).value)} />
        <label for="key-expires">Expires (optional)</label>
        <input
          id="key-expires"
          type="datetime-local"
          value={expires}
          onInput={(e) => setExpires((e.target as HTMLInputElement).value)}
        />
        {error && (
          <p class="error" role="alert">
            {error}
          </p>
        )}
        <button type="submit" class="primary" disabled={name.trim() === ''}>
          Make key
        </button>
      </form>
      {made && (
        <div class="secret" role="status" data-testid="new-secret">
          <p>
            The key for <strong>{made.name}</strong>. Copy it now: it is shown this once and cannot be read
            again.
          </p>
          <code>{made.secret}</code>
          <button type="button" onClick={() => setMade(null)}>
            I have copied it
          </button>
        </div>
      )}
    </Section>
  )
}

export function Keys() {
  const session = useSession()
  const now = useNow()
  const q = useLive<ApiKeysData>(session.token, API_KEYS, { pollMs: 10_000 })
  if (!can(session, 'ADMIN')) {
    return (
      <>
        <h1>API keys</h1>
        <p>Only admins manage keys.</p>
      </>
    )
  }
  const keys = q.data?.apiKeys
  return (
    <>
      <h1>API keys</h1>
      <ZoneNote />
      <CreateKey onCreated={q.refetch} />
      <Section title="Keys" id="key-list">
        <ErrorNote error={q.error} />
        {!keys ? (
          <Loading what="keys" />
        ) : keys.length === 0 ? (
          <p class="empty">No API key yet.</p>
        ) : (
          <table class="keys" data-testid="keys">
            <thead>
              <tr>
                <th scope="col">Name</th>
                <th scope="col">Role</th>
                <th scope="col">Teams</th>
                <th scope="col">Key</th>
                <th scope="col">Made</th>
                <th scope="col">Last used</th>
                <th scope="col">Expires</th>
                <th scope="col">
                  <span class="visually-hidden">Actions</span>
                </th>
              </tr>
            </thead>
            <tbody>
              {keys.map((k) => (
                <tr key={k.id} class={k.revokedAt ? 'revoked' : ''}>
                  <td>{k.name}</td>
                  <td>{k.role.toLowerCase()}</td>
                  <td>{k.teams.join(', ') || '—'}</td>
                  <td>
                    <code>{k.prefix}…</code>
                  </td>
                  <td>
                    <Ago iso={k.createdAt} now={now} /> by {k.createdBy}
                  </td>
                  <td>
                    <Ago iso={k.lastUsedAt} now={now} />
                  </td>
                  <td>
                    <At iso={k.expiresAt} />
                  </td>
                  <td>
                    {k.revokedAt ? (
                      <span class="muted">
                        revoked <Ago iso={k.revokedAt} now={now} />
                      </span>
                    ) : (
                      <ActionButton
                        label={`Revoke ${k.name}`}
                        kind="danger"
                        confirm={`Revoke the key of ${k.name} (${k.prefix}…)? Whatever uses it stops working.`}
                        run={async () => {
                          try {
                            await gql(session.token, REVOKE_API_KEY, { id: k.id })
                            session.notify(`Key of ${k.name} revoked.`)
                          } catch (err) {
                            session.notify(err instanceof ApiError ? err.message : String(err), 'error')
                          }
                          await q.refetch()
                        }}
                      />
                    )}
                  </td>
                </tr>
              ))}
            </tbody>
          </table>
        )}
      </Section>
    </>
  )
}
