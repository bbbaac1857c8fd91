// Reply decoding: RESP2 and RESP3 replies, as ioredis, node-redis and GLIDE give them,
// made one shape. No I/O.
import { UnexpectedReply } from "../errors.js";

export function text(v: unknown): unknown {
  return Buffer.isBuffer(v) ? v.toString("utf8") : v;
}

/** An integer reply (number, bigint, or a numeric string) as a number; null stays null. */
export function toInt(v: unknown, what: string): number | null {
  if (v === null || v === undefined) return null;
  if (typeof v === "number" && Number.isInteger(v)) return v;
  if (typeof v === "bigint") return Number(v);
  const s = text(v);
  if (typeof s === "string" && /^-?\d+$/.test(s)) return Number(s);
  throw new UnexpectedReply(`${what} answered ${String(v)}, expected an integer`);
}

/** A fencing token reply: bigint, or null for nil. */
export function toToken(v: unknown, what: string): bigint | null {
  if (v === null || v === undefined) return null;
  let t: bigint;
  if (typeof v === "bigint") t = v;
  else if (typeof v === "number" && Number.isInteger(v)) t = BigInt(v);
  else {
    const s = text(v);
    if (typeof s !== "string" || !/^\d+$/.test(s)) {
      throw new UnexpectedReply(`${what} answered ${String(v)}, expected a fencing token or nil`);
    }
    t = BigInt(s);
  }
  if (t <= 0n) throw new UnexpectedReply(`${what} answered ${t}, expected a positive token`);
  return t;
}

function pairs(v: unknown): Array<[string, unknown]> | null {
  if (v instanceof Map) return [...v.entries()].map(([k, x]) => [String(text(k)), x]);
  if (Array.isArray(v)) {
    if (v.length % 2 !== 0) return null;
    const out: Array<[string, unknown]> = [];
    for (let i = 0; i < v.length; i += 2) {
      const k = text(v[i]);
      if (typeof k !== "string") return null;
      out.push([k, v[i + 1]]);
    }
    return out;
  }
  if (v !== null && typeof v === "object" && !Buffer.isBuffer(v)) {
    return Object.entries(v as Record<string, unknown>);
  }
  return null;
}

const NESTED = new Set(["holders", "waiters", "delayed"]);

function value(v: unknown): unknown {
  if (typeof v === "bigint") return Number(v);
  return text(v);
}

/** A field/value reply (flat array in RESP2, map in RESP3) as a plain object; nested lists of records as arrays of objects. */
export function toRecord(v: unknown): Record<string, unknown> {
  const ps = pairs(v);
  if (ps === null) throw new UnexpectedReply(`expected a map or field/value array, got ${String(v)}`);
  const out: Record<string, unknown> = {};
  for (const [k, x] of ps) {
    if (NESTED.has(k) && Array.isArray(x)) {
      out[k] = x.map((e) => (pairs(e) !== null && (Array.isArray(e) || e instanceof Map || typeof e === "object") ? toRecord(e) : value(e)));
    } else if (Array.isArray(x)) {
      out[k] = x.map(value);
    } else {
      out[k] = value(x);
    }
  }
  return out;
}

/**
 * GLIDE's RESP3 maps (`[{ key, value }, …]`) as Maps, recursively; everything else as is
 * (so that GLIDE's replies decode like the other libraries').
 */
export function fromGlide(v: unknown): unknown {
  if (!Array.isArray(v)) return v;
  if (
    v.length > 0 &&
    v.every((e) => e !== null && typeof e === "object" && !Array.isArray(e) && !Buffer.isBuffer(e) && "key" in e && "value" in e)
  ) {
    return new Map(v.map((e: { key: unknown; value: unknown }) => [e.key, fromGlide(e.value)]));
  }
  return v.map(fromGlide);
}
