import java.lang.reflect.InvocationTargetException;
import java.lang.reflect.Method;
import java.util.ArrayList;
import java.util.List;
import org.apache.kafka.common.utils.Exit;

/**
 * Runs one Kafka command-line tool's main class once per argument list, in
 * one JVM: {@code ToolBatch MAIN ARGS... --next ARGS...}. The tests run the
 * commands the CLI prints this way (tests/kafka_tools/__init__.py): each
 * tool started on its own costs a JVM's start, most of its CPU.
 *
 * A tool that exits with a status other than 0 ends the batch with it;
 * one that exits with 0 (as after --version) ends only its own run. The last
 * line says how many commands ran to their end.
 */
public class ToolBatch {
    static final class ToolExit extends RuntimeException {
        final int status;

        ToolExit(int status) {
            super(null, null, false, false);
            this.status = status;
        }
    }

    public static void main(String[] args) throws Throwable {
        Method main = Class.forName(args[0]).getMethod("main", String[].class);
        Exit.setExitProcedure((status, message) -> {
            throw new ToolExit(status);
        });
        List<String> one = new ArrayList<>();
        int done = 0;
        for (int i = 1; i <= args.length; i++) {
            if (i < args.length && !args[i].equals("--next")) {
                one.add(args[i]);
                continue;
            }
            try {
                main.invoke(null, (Object) one.toArray(new String[0]));
            } catch (InvocationTargetException e) {
                if (!(e.getCause() instanceof ToolExit)) {
                    throw e.getCause();
                }
                int status = ((ToolExit) e.getCause()).status;
                if (status != 0) {
                    System.out.flush();
                    Runtime.getRuntime().halt(status);
                }
            }
            done++;
            one.clear();
        }
        System.out.println("ToolBatch: " + done + " commands ran");
        System.out.flush();
        Runtime.getRuntime().halt(0);
    }
}
