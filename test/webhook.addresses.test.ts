/**
 * The internal-address guard classifies with ipaddr.js: every special-purpose
 * range is internal, including IPv6 forms with an IPv4 address inside (NAT64,
 * 6to4, IPv4-mapped, IPv4-compatible) and the IPv4 ranges a hand-written table
 * missed (benchmarking 198.18/15, IETF protocol assignments 192.0.0/24).
 * Exemptions go by (address, port).
 */
import { describe, expect, it } from 'vitest'
import {
  addressPortKey,
  allowedInternalAddresses,
  internalAddressKind,
} from '../src/runner/steps/allowList.ts'

describe('internalAddressKind', () => {
  it.each([
    ['64:ff9b::7f00:1', /NAT64/],
    ['64:ff9b::a9fe:a9fe', /NAT64/],
    ['2002:7f00:1::', /6to4/],
    ['fec0::1', /site-local/],
    ['198.18.0.1', /reserved/],
    ['192.0.0.8', /reserved/],
    ['::ffff:7f00:1', /IPv4-mapped/],
    ['::ffff:127.0.0.1', /IPv4-mapped/],
    ['::7f00:1', /IPv4-compatible/],
    ['127.0.0.1', /loopback/],
    ['::1', /loopback/],
    ['169.254.169.254', /link-local/],
    ['10.0.0.1', /private/],
    ['100.64.0.1', /carrier-grade/],
    ['fd00::1', /unique local/],
    ['fe80::1%eth0', /link-local/],
    ['0.0.0.0', /unspecified/],
    ['255.255.255.255', /broadcast/],
    ['2001::1', /Teredo/],
  ])('%s is internal (%s)', (ip, kind) => {
    expect(internalAddressKind(ip)).toMatch(kind)
  })

  it.each(['8.8.8.8', '1.1.1.1', '2001:4860:4860::8888', '2606:4700:4700::1111'])('%s is public', (ip) => {
    expect(internalAddressKind(ip)).toBeNull()
  })
})

describe('allowedInternalAddresses', () => {
  it('names (address, port) pairs, with the default port when the entry has none, in one spelling', () => {
    const allowed = allowedInternalAddresses([
      'http://vm:4797/',
      'http://127.0.0.1:4798/',
      'https://10.0.0.5/',
      'http://[::ffff:7f00:1]:81/',
    ])
    expect(allowed.has(addressPortKey('127.0.0.1', 4798))).toBe(true)
    expect(allowed.has(addressPortKey('127.0.0.1', 4797))).toBe(false)
    expect(allowed.has(addressPortKey('10.0.0.5', 443))).toBe(true)
    expect(allowed.has(addressPortKey('10.0.0.5', 80))).toBe(false)
    expect(allowed.has(addressPortKey('::ffff:127.0.0.1', 81))).toBe(true)
    expect(allowed.size).toBe(3)
  })
})
