package io.dlock.spring.boot;

import io.dlock.Dlock;
import io.dlock.DlockException;
import io.dlock.UnknownCommandException;
import io.dlock.core.Commands;
import java.util.LinkedHashMap;
import java.util.Map;

/**
 * What the dlock health indicators report (written once for Boot 3's and Boot 4's health
 * API): one {@code DLOCK.INFO} of a probe key through the client's transport. A reply — nil,
 * as no lock lives there — means the server answers and has the module: UP. An unknown
 * command means the module is not loaded: DOWN, saying so. Any other error (no connection,
 * a timeout, an ACL refusal): DOWN with that error.
 */
final class DlockHealthProbe {
    /** The key the probe asks about (no lock is ever taken there). */
    static final String PROBE_KEY = "dlock:health-probe";
    private static final byte[] KEY = Commands.bytes(PROBE_KEY);

    /** The probe's answer: whether it is up, and the details to show. */
    record Result(boolean up, Map<String, Object> details) {
    }

    private DlockHealthProbe() {
    }

    static Result probe(Dlock dlock) {
        Map<String, Object> details = new LinkedHashMap<>();
        details.put("server", dlock.getTransport().describe());
        details.put("clientId", dlock.getId());
        long start = System.nanoTime();
        try {
            dlock.getTransport().call(KEY, Commands.info(KEY));
            details.put("module", "loaded");
            details.put("latencyMs", (System.nanoTime() - start) / 1_000_000L);
            return new Result(true, details);
        } catch (UnknownCommandException e) {
            details.put("module", "not loaded");
            details.put("error", "the server does not know DLOCK.INFO, so the dlock module is not loaded there ("
                    + e.getMessage() + ")");
            return new Result(false, details);
        } catch (DlockException e) {
            details.put("error", "DLOCK.INFO " + PROBE_KEY + " failed: " + e.getMessage());
            return new Result(false, details);
        }
    }
}
