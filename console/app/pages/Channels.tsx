/** Notification channels (admins): each channel, a test send, and the delivery log with redeliver. */
import { useState } from 'preact/hooks'
import { graphql, type ResultOf, type TadaDocumentNode } from '../../../src/client/graphql.ts'
import { ApiError, gql } from '../api.ts'
import { useLive } from '../live.ts'
import { can, type Session, useSession } from '../session.ts'
import { ActionButton, At, ErrorNote, Loading, Readable, Section, ZoneNote } from '../ui.tsx'

const CHANNELS = graphql(`query Channels {
  notificationChannels { id name kind target events teams definitionIds lateStartSeconds enabled createdAt }
  notificationDeliveries(first: 100) {
    nodes { id eventId event status attempts lastError createdAt deliveredAt nextAttemptAt rehearsal
      channel { id name } run { id definition { title } } }
  }
}`)
type ChannelsData = ResultOf<typeof CHANNELS>
type Delivery = ChannelsData['notificationDeliveries']['nodes'][number]

const TEST = graphql(`mutation TestChannel($id: ID!) { testNotificationChannel(id: $id) { id status } }`)
const REDELIVER = graphql(`mutation Redeliver($id: ID!) { redeliver(deliveryId: $id) { id status } }`)

async function act<R>(
  session: Session,
  query: TadaDocumentNode<R, { id: string }>,
  id: string,
  done: string,
  refetch: () => Promise<void>,
) {
  try {
    await gql(session.token, query, { id })
    session.notify(done)
  } catch (err) {
    session.notify(err instanceof ApiError ? err.message : String(err), 'error')
  }
  await refetch()
}

export function Channels() {
  const session = useSession()
  const data = useLive<ChannelsData>(session.token, CHANNELS, { pollMs: 2000 })
  const [status, setStatus] = useState<'ALL' | Delivery['status']>('ALL')
  if (!can(session, 'ADMIN'))
    return (
      <>
        <h1>Notification channels</h1>
        <p>Only an admin token may see and change notification channels.</p>
      </>
    )
  const channels = data.data?.notificationChannels
  const deliveries = (data.data?.notificationDeliveries.nodes ?? []).filter(
    (d) => status === 'ALL' || d.status === status,
  )
  return (
    <>
      <h1>Notification channels</h1>
      <ZoneNote />
      <p class="muted small">
        Channels are created with the <code>createNotificationChannel</code> mutation; this page tests them
        and shows what was delivered.
      </p>
      <ErrorNote error={data.error} />
      {!channels ? (
        !data.error && <Loading what="channels" />
      ) : (
        <>
          <Section title="Channels" id="channels">
            {channels.length === 0 ? (
              <p class="empty">No channel yet.</p>
            ) : (
              <ul class="cards">
                {channels.map((c) => (
                  <li key={c.id} class="card" data-channel-id={c.id}>
                    <div class="card-head">
                      <h3>{c.name}</h3>
                      <span class="badge">{c.kind.toLowerCase()}</span>
                      {!c.enabled && <span class="badge s-paused">disabled</span>}
                    </div>
                    <p class="muted small">{c.target}</p>
                    <p class="small">
                      {c.events.join(', ')}
                      {c.teams ? ` · teams ${c.teams.join(', ')}` : ''}
                      {c.definitionIds ? ` · definitions ${c.definitionIds.join(', ')}` : ''}
                      {c.events.includes('RUN_LATE_START') ? ` · late after ${c.lateStartSeconds}s` : ''}
                    </p>
                    <ActionButton
                      label="Send a test"
                      run={() => act(session, TEST, c.id, `Test sent to ${c.name}.`, data.refetch)}
                    />
                  </li>
                ))}
              </ul>
            )}
          </Section>
          <Section
            title="Deliveries"
            id="deliveries"
            extra={
              <label>
                Status{' '}
                <select
                  value={status}
                  onChange={(e) => setStatus((e.target as HTMLSelectElement).value as typeof status)}
                >
                  {['ALL', 'PENDING', 'DELIVERED', 'FAILED'].map((s) => (
                    <option key={s} value={s}>
                      {s.toLowerCase()}
                    </option>
                  ))}
                </select>
              </label>
            }
          >
            {deliveries.length === 0 ? (
              <p class="empty">Nothing delivered yet.</p>
            ) : (
              <ol class="log" aria-label="Deliveries, newest first">
                {deliveries.map((d) => (
                  <li key={d.id} class={`delivery d-${d.status.toLowerCase()}`} data-delivery-id={d.id}>
                    <At iso={d.createdAt} /> <strong>{d.event}</strong> → {d.channel.name}{' '}
                    <span class="badge">{d.rehearsal ? 'rehearsal' : d.status.toLowerCase()}</span>{' '}
                    {d.run && <a href={`#/runs/${d.run.id}`}>{d.run.definition.title}</a>}{' '}
                    <span class="muted">
                      {d.attempts} attempt{d.attempts === 1 ? '' : 's'}
                      {d.nextAttemptAt && d.status === 'PENDING' ? ' · retrying' : ''}
                    </span>
                    {d.lastError && (
                      <div class="row-error">
                        <Readable text={d.lastError} />
                      </div>
                    )}
                    {!d.rehearsal && d.status !== 'PENDING' && (
                      <ActionButton
                        label="Redeliver"
                        run={() => act(session, REDELIVER, d.id, 'Sent again.', data.refetch)}
                      />
                    )}
                  </li>
                ))}
              </ol>
            )}
          </Section>
        </>
      )}
    </>
  )
}
