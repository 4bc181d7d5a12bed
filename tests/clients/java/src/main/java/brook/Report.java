package brook;

import java.util.concurrent.ExecutionException;

/** The {@code name value} lines the Rust tests read, and the guard around each check. */
final class Report {
    private Report() {}

    interface Check {
        void run() throws Exception;
    }

    static synchronized void put(String name, Object value) {
        System.out.println(name + " " + value);
        System.out.flush();
    }

    /**
     * Runs one check; if it throws, prints {@code name.error} with the
     * exception (its cause for an ExecutionException) and its stack on stderr.
     */
    static void check(String name, Check check) {
        try {
            check.run();
        } catch (Throwable error) {
            put(name + ".error", describe(error));
            error.printStackTrace();
        }
    }

    static String describe(Throwable error) {
        Throwable cause = error;
        while (cause instanceof ExecutionException && cause.getCause() != null) {
            cause = cause.getCause();
        }
        String message = String.valueOf(cause.getMessage()).replace('\n', ' ');
        return cause.getClass().getSimpleName() + ": " + message;
    }
}
