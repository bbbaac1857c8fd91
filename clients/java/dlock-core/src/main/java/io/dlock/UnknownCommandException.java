package io.dlock;

/**
 * The server does not know a DLOCK.* command: the dlock module is not loaded there, or it
 * is older than this client. The message says how to load it.
 */
public class UnknownCommandException extends DlockServerException {
    private static final long serialVersionUID = 1L;
    private final String command;

    /** The server's error text and the command that was sent. */
    public UnknownCommandException(String message, String command) {
        super("ERR", message + " (is the dlock module loaded? Start the server with"
                + " `--loadmodule /path/to/libdlock.so` or run `MODULE LOAD /path/to/libdlock.so`;"
                + " an older module may lack " + (command == null ? "this command" : command) + ")");
        this.command = command;
    }

    /** The command the server did not know, e.g. {@code DLOCK.CANCEL}. */
    public String command() {
        return command;
    }
}
