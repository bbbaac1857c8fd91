package io.dlock;

/** The server answered with something no dlock command answers (is the module loaded?). */
public class UnexpectedReplyException extends DlockException {
    private static final long serialVersionUID = 1L;

    /** An exception with a message naming what came and what was expected. */
    public UnexpectedReplyException(String message) {
        super(message);
    }
}
