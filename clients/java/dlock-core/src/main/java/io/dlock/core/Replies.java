package io.dlock.core;

import io.dlock.UnexpectedReplyException;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

/**
 * Parses replies. A transport hands replies over as {@code null} (nil), {@link Long},
 * {@code byte[]} (bulk or simple string), {@link List} (array) or {@link Map} (RESP3 map);
 * error replies never reach here (the transport throws {@link Errors#fromServer}).
 */
public final class Replies {
    private Replies() {}

    /** The fencing token of an acquire reply, or null when not granted. */
    public static Long token(Object reply) {
        if (reply == null) {
            return null;
        }
        if (reply instanceof Long l && l > 0) {
            return l;
        }
        throw new UnexpectedReplyException("acquire answered " + show(reply)
                + ", expected a fencing token (positive integer) or nil; is the dlock module loaded?");
    }

    /** {@code DLOCK.RELEASE}: true when the hold is gone (1), false when still held (0). */
    public static boolean released(Object reply) {
        if (reply instanceof Long l && (l == 0 || l == 1)) {
            return l == 1;
        }
        throw new UnexpectedReplyException("DLOCK.RELEASE answered " + show(reply) + ", expected 1 or 0");
    }

    /** An integer reply. */
    public static long integer(Object reply, String what) {
        if (reply instanceof Long l) {
            return l;
        }
        throw new UnexpectedReplyException(what + " answered " + show(reply) + ", expected an integer");
    }

    /** UTF-8 text of a bulk/simple string (or the decimal text of an integer). */
    public static String text(Object v) {
        if (v instanceof byte[] b) {
            return new String(b, StandardCharsets.UTF_8);
        }
        return v == null ? null : v.toString();
    }

    /**
     * {@code DLOCK.INFO} as a map with string keys; {@code holders}, {@code waiters} and
     * {@code delayed} as lists of such maps; other values as sent ({@code byte[]} or
     * {@link Long}). Null when no lock exists.
     */
    public static Map<String, Object> info(Object reply) {
        if (reply == null) {
            return null;
        }
        return fields(reply);
    }

    private static Map<String, Object> fields(Object reply) {
        Map<String, Object> out = new LinkedHashMap<>();
        if (reply instanceof Map<?, ?> m) {
            for (Map.Entry<?, ?> e : m.entrySet()) {
                put(out, text(e.getKey()), e.getValue());
            }
        } else if (reply instanceof List<?> l) {
            for (int i = 0; i + 1 < l.size(); i += 2) {
                put(out, text(l.get(i)), l.get(i + 1));
            }
        } else {
            throw new UnexpectedReplyException("DLOCK.INFO answered " + show(reply) + ", expected a field/value array");
        }
        return out;
    }

    private static void put(Map<String, Object> out, String k, Object v) {
        if (("holders".equals(k) || "waiters".equals(k) || "delayed".equals(k)) && v instanceof List<?> l) {
            List<Object> list = new ArrayList<>(l.size());
            for (Object e : l) {
                list.add(e instanceof List<?> || e instanceof Map<?, ?> ? fields(e) : e);
            }
            out.put(k, list);
        } else if (("kind".equals(k) || "mode".equals(k) || "state".equals(k) || "owner".equals(k)) && v instanceof byte[]) {
            out.put(k, text(v));
        } else {
            out.put(k, v);
        }
    }

    /**
     * The live holders of an INFO map (empty when none). A holder listed with {@code ttl 0}
     * has reached its lease's end: a module whose timer has not run yet still lists it
     * while {@code DLOCK.CHECK} already answers 0 and a new acquire succeeds, so it is left
     * out here, as the server leaves it out once its timer ran.
     */
    @SuppressWarnings("unchecked")
    public static List<Map<String, Object>> holders(Map<String, Object> info) {
        Object h = info == null ? null : info.get("holders");
        if (!(h instanceof List<?> all)) {
            return List.of();
        }
        List<Map<String, Object>> live = new ArrayList<>(all.size());
        for (Object o : all) {
            if (o instanceof Map<?, ?> m && !(m.get("ttl") instanceof Long t && t <= 0)) {
                live.add((Map<String, Object>) m);
            }
        }
        return live;
    }

    /** A short printable form of a reply, for error messages. */
    public static String show(Object reply) {
        if (reply == null) {
            return "nil";
        }
        if (reply instanceof byte[] b) {
            return "\"" + new String(b, StandardCharsets.UTF_8) + "\"";
        }
        return reply.toString();
    }
}
