package io.dlock.core;

import io.dlock.DeadlockException;
import io.dlock.DlockServerException;
import io.dlock.FencedException;
import io.dlock.NoReplicasException;
import io.dlock.NotHeldException;
import io.dlock.QueueFullException;
import io.dlock.UnknownCommandException;
import io.dlock.WrongKindException;
import java.util.Locale;

/** Maps an error reply's text to the dlock exception for it. */
public final class Errors {
    private Errors() {}

    /**
     * The exception for the error reply {@code message} (as the server sent it, without
     * the leading {@code -}) to {@code command}.
     */
    public static DlockServerException fromServer(String message, String command) {
        String msg = message == null ? "" : message;
        if (msg.startsWith("-")) {
            msg = msg.substring(1);
        }
        int sp = msg.indexOf(' ');
        String code = sp < 0 ? msg : msg.substring(0, sp);
        switch (code) {
            case "NOTHELD":
                return new NotHeldException(msg);
            case "DEADLOCK":
                return new DeadlockException(msg);
            case "WRONGKIND":
                return new WrongKindException(msg);
            case "WRONGTYPE":
                return new WrongKindException("WRONGTYPE", msg + " (" + command + " needs a dlock lock at the key or"
                        + " none; the key holds a value of another Redis type)");
            case "QUEUEFULL":
                return new QueueFullException(msg);
            case "FENCED":
                return new FencedException(msg);
            case "NOREPLICAS":
                return new NoReplicasException(msg);
            default:
                break;
        }
        String low = msg.toLowerCase(Locale.ROOT);
        if (low.startsWith("err unknown command") || low.startsWith("unknown command")) {
            return new UnknownCommandException(msg, command);
        }
        return new DlockServerException(code, msg);
    }
}
