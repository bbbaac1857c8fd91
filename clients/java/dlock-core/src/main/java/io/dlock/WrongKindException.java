package io.dlock;

/**
 * The key holds something else than the command works on: {@code WRONGKIND}, a lock of
 * another kind (the message names the kind found), or {@code WRONGTYPE}, a value of
 * another Redis type ({@link #code()} tells which).
 */
public class WrongKindException extends DlockServerException {
    private static final long serialVersionUID = 1L;

    /** An exception for the server's error text {@code message}. */
    public WrongKindException(String message) {
        super("WRONGKIND", message);
    }

    /** An exception for the error reply {@code code} ({@code WRONGKIND} or {@code WRONGTYPE}) with {@code message}. */
    public WrongKindException(String code, String message) {
        super(code, message);
    }
}
