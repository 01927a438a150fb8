/**
 * The admin token of a server that has no SHOWRUNNER_TOKENS and runs on its
 * private MariaDB: made once, kept in a file next to that database, and read
 * again at every start, so scripts and browser tabs keep working across
 * restarts. The file admits only its owner (0600), like the database folder
 * beside it, whose socket already lets that user in as root.
 */
import { randomBytes } from 'node:crypto'
import { chmod, link, mkdir, readFile, rm, stat, writeFile } from 'node:fs/promises'
import { dirname } from 'node:path'
import { generateToken, MIN_TOKEN_LENGTH } from './config.ts'

/** The token file's name inside the private database's folder. */
export const ADMIN_TOKEN_FILE = 'admin-token'

export class AdminTokenError extends Error {
  override readonly name = 'AdminTokenError'
}

/** What {@link loadOrCreateAdminToken} found or made. */
export interface KeptToken {
  token: string
  file: string
  /** True when this call made the token (first start, or the file was removed). */
  created: boolean
  /** Set when the file's mode admitted others and was narrowed to 0600. */
  narrowedFrom?: number
}

/**
 * Read the token kept in `file`, or make one and keep it there (mode 0600).
 * @throws {AdminTokenError} when the file holds something that is not a usable token.
 */
export async function loadOrCreateAdminToken(file: string): Promise<KeptToken> {
  let text: string | undefined
  try {
    text = await readFile(file, 'utf8')
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'ENOENT') throw err
  }
  if (text === undefined) {
    await mkdir(dirname(file), { recursive: true, mode: 0o700 })
    const token = generateToken()
    // Written whole under a private name, then linked into place: link() fails
    // when the file exists, so two processes starting at once keep one token,
    // and nobody ever reads a half-written file.
    const tmp = `${file}.${process.pid}.${randomBytes(4).toString('hex')}`
    await writeFile(tmp, `${token}\n`, { mode: 0o600, flag: 'wx' })
    try {
      await link(tmp, file)
      return { token, file, created: true }
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'EEXIST') throw err
      text = await readFile(file, 'utf8')
    } finally {
      await rm(tmp, { force: true })
    }
  }
  const token = text.trim()
  if (token.length < MIN_TOKEN_LENGTH || /\s/.test(token)) {
    throw new AdminTokenError(
      `${file} does not hold a usable token (one line of at least ${MIN_TOKEN_LENGTH} characters, no spaces). ` +
        'Delete it to have a new one made at the next start, or set SHOWRUNNER_TOKENS.',
    )
  }
  const mode = (await stat(file)).mode & 0o777
  if ((mode & 0o077) !== 0) {
    await chmod(file, 0o600)
    return { token, file, created: false, narrowedFrom: mode }
  }
  return { token, file, created: false }
}
