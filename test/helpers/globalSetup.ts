import mysql from 'mysql2/promise'
import { testServerUrl } from './db.ts'

/** Fail fast, with the fix, when the test database server is not reachable. */
export default async function globalSetup(): Promise<void> {
  const url = testServerUrl()
  try {
    const conn = await mysql.createConnection({ uri: url, connectTimeout: 5000 })
    await conn.end()
  } catch (err) {
    throw new Error(
      `Cannot reach MariaDB at ${url} (${(err as Error).message}).\n` +
        'Start it with: start-stop-daemon --start --oknodo --background --exec /usr/sbin/mariadbd\n' +
        'or point TEST_DATABASE_URL at a server where the user may create databases.',
    )
  }
}
