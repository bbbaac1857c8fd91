package io.dlock;

import java.io.ByteArrayOutputStream;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

/**
 * {@code DEADLOCK}: waiting would close a wait-for cycle across locks (nothing was queued;
 * release what you hold and retry), or a second reader asked to upgrade to WRITE while
 * another already waits to (then {@link #cycle()} is empty).
 */
public class DeadlockException extends DlockServerException {
    private static final long serialVersionUID = 1L;
    private static final String PREFIX = "DEADLOCK cycle: ";
    private static final String QUOTED = "\"((?:[^\"\\\\]|\\\\.)*)\"";
    private static final Pattern STEP = Pattern.compile(QUOTED + " waits for " + QUOTED + " on " + QUOTED);
    private static final Pattern ESC = Pattern.compile("\\\\(x[0-9a-fA-F]{2}|.)", Pattern.DOTALL);

    /** One step of the cycle: {@code owner} waits for {@code waitsFor} on {@code key}. */
    public record Step(String owner, String waitsFor, String key) {}

    private final transient List<Step> cycle;

    /** An exception for the server's error text. */
    public DeadlockException(String message) {
        super("DEADLOCK", message);
        this.cycle = parse(message);
    }

    /** The cycle's steps, starting with the owner whose request closed it. */
    public List<Step> cycle() {
        return cycle == null ? List.of() : cycle;
    }

    /** The keys of the cycle, in order. */
    public List<String> keys() {
        return cycle().stream().map(Step::key).toList();
    }

    /** The owners of the cycle, in order. */
    public List<String> owners() {
        return cycle().stream().map(Step::owner).toList();
    }

    static List<Step> parse(String message) {
        String text = message.startsWith("-") ? message.substring(1) : message;
        if (!text.startsWith(PREFIX)) {
            return List.of();
        }
        List<Step> out = new ArrayList<>();
        Matcher m = STEP.matcher(text.substring(PREFIX.length()));
        while (m.find()) {
            out.add(new Step(unquote(m.group(1)), unquote(m.group(2)), unquote(m.group(3))));
        }
        return List.copyOf(out);
    }

    private static String unquote(String s) {
        ByteArrayOutputStream out = new ByteArrayOutputStream();
        Matcher m = ESC.matcher(s);
        int pos = 0;
        while (m.find()) {
            out.writeBytes(s.substring(pos, m.start()).getBytes(StandardCharsets.UTF_8));
            String e = m.group(1);
            if (e.length() == 3 && e.charAt(0) == 'x') {
                out.write(Integer.parseInt(e.substring(1), 16));
            } else {
                switch (e.charAt(0)) {
                    case 'n' -> out.write('\n');
                    case 'r' -> out.write('\r');
                    case 't' -> out.write('\t');
                    default -> out.writeBytes(e.getBytes(StandardCharsets.UTF_8));
                }
            }
            pos = m.end();
        }
        out.writeBytes(s.substring(pos).getBytes(StandardCharsets.UTF_8));
        return out.toString(StandardCharsets.UTF_8);
    }
}
