// Redis Cluster key slots (CRC16/XMODEM of the hash tag or key, mod 16384).

const TABLE = (() => {
  const t = new Uint16Array(256);
  for (let i = 0; i < 256; i++) {
    let c = i << 8;
    for (let j = 0; j < 8; j++) c = c & 0x8000 ? ((c << 1) ^ 0x1021) & 0xffff : (c << 1) & 0xffff;
    t[i] = c;
  }
  return t;
})();

function crc16(buf: Uint8Array): number {
  let crc = 0;
  for (const b of buf) crc = ((crc << 8) & 0xffff) ^ (TABLE[((crc >> 8) ^ b) & 0xff] as number);
  return crc;
}

export function toBytes(key: string | Buffer): Buffer {
  return typeof key === "string" ? Buffer.from(key, "utf8") : key;
}

/** The bytes of `key` that decide its slot: the content of its first `{…}` hash tag when non-empty. */
export function hashPart(key: Buffer): Buffer {
  const open = key.indexOf(0x7b);
  if (open < 0) return key;
  const close = key.indexOf(0x7d, open + 1);
  if (close <= open + 1) return key;
  return key.subarray(open + 1, close);
}

/** The cluster slot of `key` (0..16383). */
export function keySlot(key: string | Buffer): number {
  return crc16(hashPart(toBytes(key))) & 16383;
}

/**
 * The channel on which the module publishes `released`, `expired`, `deleted` and
 * `disconnected` for `key`: `dlock:` + key when the key has a hash tag, else
 * `dlock:{` + key + `}`.
 */
export function channelFor(key: string): string {
  const b = toBytes(key);
  return hashPart(b) !== b ? `dlock:${key}` : `dlock:{${key}}`;
}
