package io.dlock;

/** The server answered a command with an error reply; {@link #code()} is its first word. */
public class DlockServerException extends DlockException {
    private static final long serialVersionUID = 1L;
    private final String code;

    /** An error reply whose first word is {@code code}. */
    public DlockServerException(String code, String message) {
        super(message);
        this.code = code;
    }

    /** The first word of the error reply ({@code ERR}, {@code NOTHELD}, {@code DEADLOCK}, …). */
    public String code() {
        return code;
    }
}
