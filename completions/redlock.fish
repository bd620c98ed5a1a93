# Print an optspec for argparse to handle cmd's options that are independent of any subcommand.
function __fish_redlock_global_optspecs
    string join \n redis= password-file= prefix= connect-timeout= command-timeout= release-timeout= tls-ca= tls-cert= tls-key= tls-server-name= tls-insecure q/quiet v/verbose log-format= h/help V/version
end

function __fish_redlock_needs_command
    # Figure out if the current invocation already has a command.
    set -l cmd (commandline -opc)
    set -e cmd[1]
    argparse -s (__fish_redlock_global_optspecs) -- $cmd 2>/dev/null
    or return
    if set -q argv[1]
        # Also print the command, so this can be used to figure out what it is.
        echo $argv[1]
        return 1
    end
    return 0
end

function __fish_redlock_using_subcommand
    set -l cmd (__fish_redlock_needs_command)
    test -z "$cmd"
    and return 1
    contains -- $cmd[1] $argv
end

complete -c redlock -n "__fish_redlock_needs_command" -l redis -d 'Redis server URL; repeat for quorum mode [default: $REDIS_URL, else redis://127.0.0.1:6379]' -r
complete -c redlock -n "__fish_redlock_needs_command" -l password-file -d 'Read the Redis password from this file (its first line)' -r -F
complete -c redlock -n "__fish_redlock_needs_command" -l prefix -d 'Prefix of every key redlock writes' -r
complete -c redlock -n "__fish_redlock_needs_command" -l connect-timeout -d 'Give up connecting to Redis after this long (TLS handshake and login included)' -r
complete -c redlock -n "__fish_redlock_needs_command" -l command-timeout -d 'Give up on any single Redis command after this long' -r
complete -c redlock -n "__fish_redlock_needs_command" -l release-timeout -d 'Keep sending a release known not to have run (refused, no server reached) this long' -r
complete -c redlock -n "__fish_redlock_needs_command" -l tls-ca -d 'Trust the CAs in this PEM bundle instead of the system\'s' -r -F
complete -c redlock -n "__fish_redlock_needs_command" -l tls-cert -d 'Client certificate (PEM) for servers that require one; needs --tls-key' -r -F
complete -c redlock -n "__fish_redlock_needs_command" -l tls-key -d 'Private key (PEM) of --tls-cert; should be readable by its owner only' -r -F
complete -c redlock -n "__fish_redlock_needs_command" -l tls-server-name -d 'Verify the server\'s certificate against NAME instead of the URL\'s host' -r
complete -c redlock -n "__fish_redlock_needs_command" -l log-format -d 'Write redlock\'s own stderr lines as text, or as one JSON object per line' -r -f -a "text\t''
json\t''"
complete -c redlock -n "__fish_redlock_needs_command" -l tls-insecure -d 'Do not verify the server\'s certificate at all (development only; redlock warns)'
complete -c redlock -n "__fish_redlock_needs_command" -s q -l quiet -d 'Print no notices for expected outcomes (busy, not held, free); errors still print'
complete -c redlock -n "__fish_redlock_needs_command" -s v -l verbose -d 'Log each step to stderr'
complete -c redlock -n "__fish_redlock_needs_command" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c redlock -n "__fish_redlock_needs_command" -s V -l version -d 'Print version'
complete -c redlock -n "__fish_redlock_needs_command" -f -a "run" -d 'Run a command while holding a lock; exit 75 if someone else holds it'
complete -c redlock -n "__fish_redlock_needs_command" -f -a "acquire" -d 'Take a lock and print its token; exit 75 if someone else holds it'
complete -c redlock -n "__fish_redlock_needs_command" -f -a "release" -d 'Release a lock held by a token, or --force it free'
complete -c redlock -n "__fish_redlock_needs_command" -f -a "extend" -d 'Renew the lease of a lock you hold; exit 1 if the token no longer holds it'
complete -c redlock -n "__fish_redlock_needs_command" -f -a "inspect" -d 'Show who holds a lock, since when, and for how much longer; exit 1 if it is free'
complete -c redlock -n "__fish_redlock_needs_command" -f -a "history" -d 'Show a lock\'s last holds: who, when, how long, and how each ended'
complete -c redlock -n "__fish_redlock_needs_command" -f -a "check" -d 'Tell whether a job succeeded within a window; exit 80-83 if not'
complete -c redlock -n "__fish_redlock_needs_command" -f -a "list" -d 'List the held locks under the prefix, with their holders'
complete -c redlock -n "__fish_redlock_needs_command" -f -a "metrics" -d 'Print the locks under the prefix as Prometheus metrics'
complete -c redlock -n "__fish_redlock_needs_command" -f -a "doctor" -d 'Check what the Redis server does to the safety of locks; exit 1 if anything is unsafe'
complete -c redlock -n "__fish_redlock_needs_command" -f -a "completions" -d 'Print a shell completion script to stdout'
complete -c redlock -n "__fish_redlock_needs_command" -f -a "man" -d 'Print a manual page, or install them all'
complete -c redlock -n "__fish_redlock_using_subcommand run" -l redis -d 'Redis server URL; repeat for quorum mode [default: $REDIS_URL, else redis://127.0.0.1:6379]' -r
complete -c redlock -n "__fish_redlock_using_subcommand run" -l password-file -d 'Read the Redis password from this file (its first line)' -r -F
complete -c redlock -n "__fish_redlock_using_subcommand run" -l prefix -d 'Prefix of every key redlock writes' -r
complete -c redlock -n "__fish_redlock_using_subcommand run" -l connect-timeout -d 'Give up connecting to Redis after this long (TLS handshake and login included)' -r
complete -c redlock -n "__fish_redlock_using_subcommand run" -l command-timeout -d 'Give up on any single Redis command after this long' -r
complete -c redlock -n "__fish_redlock_using_subcommand run" -l release-timeout -d 'Keep sending a release known not to have run (refused, no server reached) this long' -r
complete -c redlock -n "__fish_redlock_using_subcommand run" -l tls-ca -d 'Trust the CAs in this PEM bundle instead of the system\'s' -r -F
complete -c redlock -n "__fish_redlock_using_subcommand run" -l tls-cert -d 'Client certificate (PEM) for servers that require one; needs --tls-key' -r -F
complete -c redlock -n "__fish_redlock_using_subcommand run" -l tls-key -d 'Private key (PEM) of --tls-cert; should be readable by its owner only' -r -F
complete -c redlock -n "__fish_redlock_using_subcommand run" -l tls-server-name -d 'Verify the server\'s certificate against NAME instead of the URL\'s host' -r
complete -c redlock -n "__fish_redlock_using_subcommand run" -l log-format -d 'Write redlock\'s own stderr lines as text, or as one JSON object per line' -r -f -a "text\t''
json\t''"
complete -c redlock -n "__fish_redlock_using_subcommand run" -s k -l key -d 'Name of the lock (or give it as the first word, as flock, consul lock and etcdctl lock take theirs)' -r
complete -c redlock -n "__fish_redlock_using_subcommand run" -s w -l wait -d 'Wait up to this long for a busy lock (e.g. 10m, or `forever`), in a fair FIFO queue' -r
complete -c redlock -n "__fish_redlock_using_subcommand run" -l limit -d 'Make the lock a semaphore: at most N holders at once (all must use the same N)' -r
complete -c redlock -n "__fish_redlock_using_subcommand run" -s E -l conflict-exit-code -d 'Exit with CODE instead of 75 when the lock is busy (-E 0 -q: skip quietly)' -r
complete -c redlock -n "__fish_redlock_using_subcommand run" -l progress-every -d 'Without a terminal (a CI log), say where the wait stands this often (0: only when it starts)' -r
complete -c redlock -n "__fish_redlock_using_subcommand run" -l replicas -d 'Count the lock as taken, and each renewal as done, only once N replicas acknowledged them (Redis WAIT)' -r
complete -c redlock -n "__fish_redlock_using_subcommand run" -l note -d 'Why this holds the lock, shown by inspect, list, history and to waiters [default: the CI job\'s URL]' -r
complete -c redlock -n "__fish_redlock_using_subcommand run" -l history -d 'Keep the lock\'s last N holds in its history (1 to 1000) [default: the lock\'s own, else 100]' -r
complete -c redlock -n "__fish_redlock_using_subcommand run" -l history-ttl -d 'Keep the lock\'s history this long after its last change (1m to 366d) [default: the lock\'s own, else 30d]' -r
complete -c redlock -n "__fish_redlock_using_subcommand run" -l ttl -d 'Lease, renewed while the command runs; how long the lock outlives a crashed host' -r
complete -c redlock -n "__fish_redlock_using_subcommand run" -l renew-every -d 'Renew the lease this often [default: ttl/3]' -r
complete -c redlock -n "__fish_redlock_using_subcommand run" -l kill-after -d 'Grace between SIGTERM and SIGKILL when stopping the command [default: 10s]' -r
complete -c redlock -n "__fish_redlock_using_subcommand run" -l max-runtime -d 'Stop the command (SIGTERM, grace, SIGKILL) after this long and exit 124' -r
complete -c redlock -n "__fish_redlock_using_subcommand run" -l min-hold -d 'Keep the lock until this long after acquisition, even if the command ends sooner' -r
complete -c redlock -n "__fish_redlock_using_subcommand run" -s c -l shell-command -d 'Run STRING with `sh -c` instead of a command given as arguments' -r
complete -c redlock -n "__fish_redlock_using_subcommand run" -l tls-insecure -d 'Do not verify the server\'s certificate at all (development only; redlock warns)'
complete -c redlock -n "__fish_redlock_using_subcommand run" -s q -l quiet -d 'Print no notices for expected outcomes (busy, not held, free); errors still print'
complete -c redlock -n "__fish_redlock_using_subcommand run" -s v -l verbose -d 'Log each step to stderr'
complete -c redlock -n "__fish_redlock_using_subcommand run" -s n -l no-wait -d 'Do not wait for a busy lock (the default; flock\'s -n)'
complete -c redlock -n "__fish_redlock_using_subcommand run" -s s -l shared -d 'Share the lock with other --shared holders (a read lock); exclusive requests queued before a shared one go first, so writers are not starved'
complete -c redlock -n "__fish_redlock_using_subcommand run" -s x -l exclusive -d 'Take the lock exclusively (the default; flock\'s -x)'
complete -c redlock -n "__fish_redlock_using_subcommand run" -l no-reenter -d 'Inside a command run under this same lock, take it anew instead of re-entering it'
complete -c redlock -n "__fish_redlock_using_subcommand run" -l hide-arguments -d 'Record only the program\'s name, not its arguments, in the lock\'s holder record and history'
complete -c redlock -n "__fish_redlock_using_subcommand run" -l pid-namespace -d 'Run the command in a PID namespace of its own: all it starts dies with it, and with redlock, even on kill -9'
complete -c redlock -n "__fish_redlock_using_subcommand run" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c redlock -n "__fish_redlock_using_subcommand acquire" -l redis -d 'Redis server URL; repeat for quorum mode [default: $REDIS_URL, else redis://127.0.0.1:6379]' -r
complete -c redlock -n "__fish_redlock_using_subcommand acquire" -l password-file -d 'Read the Redis password from this file (its first line)' -r -F
complete -c redlock -n "__fish_redlock_using_subcommand acquire" -l prefix -d 'Prefix of every key redlock writes' -r
complete -c redlock -n "__fish_redlock_using_subcommand acquire" -l connect-timeout -d 'Give up connecting to Redis after this long (TLS handshake and login included)' -r
complete -c redlock -n "__fish_redlock_using_subcommand acquire" -l command-timeout -d 'Give up on any single Redis command after this long' -r
complete -c redlock -n "__fish_redlock_using_subcommand acquire" -l release-timeout -d 'Keep sending a release known not to have run (refused, no server reached) this long' -r
complete -c redlock -n "__fish_redlock_using_subcommand acquire" -l tls-ca -d 'Trust the CAs in this PEM bundle instead of the system\'s' -r -F
complete -c redlock -n "__fish_redlock_using_subcommand acquire" -l tls-cert -d 'Client certificate (PEM) for servers that require one; needs --tls-key' -r -F
complete -c redlock -n "__fish_redlock_using_subcommand acquire" -l tls-key -d 'Private key (PEM) of --tls-cert; should be readable by its owner only' -r -F
complete -c redlock -n "__fish_redlock_using_subcommand acquire" -l tls-server-name -d 'Verify the server\'s certificate against NAME instead of the URL\'s host' -r
complete -c redlock -n "__fish_redlock_using_subcommand acquire" -l log-format -d 'Write redlock\'s own stderr lines as text, or as one JSON object per line' -r -f -a "text\t''
json\t''"
complete -c redlock -n "__fish_redlock_using_subcommand acquire" -s k -l key -d 'Name of the lock (or give it as the first word, as flock, consul lock and etcdctl lock take theirs)' -r
complete -c redlock -n "__fish_redlock_using_subcommand acquire" -s w -l wait -d 'Wait up to this long for a busy lock (e.g. 10m, or `forever`), in a fair FIFO queue' -r
complete -c redlock -n "__fish_redlock_using_subcommand acquire" -l limit -d 'Make the lock a semaphore: at most N holders at once (all must use the same N)' -r
complete -c redlock -n "__fish_redlock_using_subcommand acquire" -s E -l conflict-exit-code -d 'Exit with CODE instead of 75 when the lock is busy (-E 0 -q: skip quietly)' -r
complete -c redlock -n "__fish_redlock_using_subcommand acquire" -l progress-every -d 'Without a terminal (a CI log), say where the wait stands this often (0: only when it starts)' -r
complete -c redlock -n "__fish_redlock_using_subcommand acquire" -l replicas -d 'Count the lock as taken, and each renewal as done, only once N replicas acknowledged them (Redis WAIT)' -r
complete -c redlock -n "__fish_redlock_using_subcommand acquire" -l note -d 'Why this holds the lock, shown by inspect, list, history and to waiters [default: the CI job\'s URL]' -r
complete -c redlock -n "__fish_redlock_using_subcommand acquire" -l history -d 'Keep the lock\'s last N holds in its history (1 to 1000) [default: the lock\'s own, else 100]' -r
complete -c redlock -n "__fish_redlock_using_subcommand acquire" -l history-ttl -d 'Keep the lock\'s history this long after its last change (1m to 366d) [default: the lock\'s own, else 30d]' -r
complete -c redlock -n "__fish_redlock_using_subcommand acquire" -l ttl -d 'Lease: the lock expires this long after acquisition unless extended (e.g. 30s, 10m, 90)' -r
complete -c redlock -n "__fish_redlock_using_subcommand acquire" -l while-pid -d 'With --keep-alive: release the lock when this process exits (it must exist)' -r
complete -c redlock -n "__fish_redlock_using_subcommand acquire" -l max-hold -d 'With --keep-alive: stop renewing this long after acquisition' -r
complete -c redlock -n "__fish_redlock_using_subcommand acquire" -l tls-insecure -d 'Do not verify the server\'s certificate at all (development only; redlock warns)'
complete -c redlock -n "__fish_redlock_using_subcommand acquire" -s q -l quiet -d 'Print no notices for expected outcomes (busy, not held, free); errors still print'
complete -c redlock -n "__fish_redlock_using_subcommand acquire" -s v -l verbose -d 'Log each step to stderr'
complete -c redlock -n "__fish_redlock_using_subcommand acquire" -s n -l no-wait -d 'Do not wait for a busy lock (the default; flock\'s -n)'
complete -c redlock -n "__fish_redlock_using_subcommand acquire" -s s -l shared -d 'Share the lock with other --shared holders (a read lock); exclusive requests queued before a shared one go first, so writers are not starved'
complete -c redlock -n "__fish_redlock_using_subcommand acquire" -s x -l exclusive -d 'Take the lock exclusively (the default; flock\'s -x)'
complete -c redlock -n "__fish_redlock_using_subcommand acquire" -l no-reenter -d 'Inside a command run under this same lock, take it anew instead of re-entering it'
complete -c redlock -n "__fish_redlock_using_subcommand acquire" -l json -d 'Print a JSON object instead of the bare token (also when the lock is busy)'
complete -c redlock -n "__fish_redlock_using_subcommand acquire" -l keep-alive -d 'Keep renewing the lease in the background until `release`, for steps that run in separate shells (CI steps, make recipes)'
complete -c redlock -n "__fish_redlock_using_subcommand acquire" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c redlock -n "__fish_redlock_using_subcommand release" -l redis -d 'Redis server URL; repeat for quorum mode [default: $REDIS_URL, else redis://127.0.0.1:6379]' -r
complete -c redlock -n "__fish_redlock_using_subcommand release" -l password-file -d 'Read the Redis password from this file (its first line)' -r -F
complete -c redlock -n "__fish_redlock_using_subcommand release" -l prefix -d 'Prefix of every key redlock writes' -r
complete -c redlock -n "__fish_redlock_using_subcommand release" -l connect-timeout -d 'Give up connecting to Redis after this long (TLS handshake and login included)' -r
complete -c redlock -n "__fish_redlock_using_subcommand release" -l command-timeout -d 'Give up on any single Redis command after this long' -r
complete -c redlock -n "__fish_redlock_using_subcommand release" -l release-timeout -d 'Keep sending a release known not to have run (refused, no server reached) this long' -r
complete -c redlock -n "__fish_redlock_using_subcommand release" -l tls-ca -d 'Trust the CAs in this PEM bundle instead of the system\'s' -r -F
complete -c redlock -n "__fish_redlock_using_subcommand release" -l tls-cert -d 'Client certificate (PEM) for servers that require one; needs --tls-key' -r -F
complete -c redlock -n "__fish_redlock_using_subcommand release" -l tls-key -d 'Private key (PEM) of --tls-cert; should be readable by its owner only' -r -F
complete -c redlock -n "__fish_redlock_using_subcommand release" -l tls-server-name -d 'Verify the server\'s certificate against NAME instead of the URL\'s host' -r
complete -c redlock -n "__fish_redlock_using_subcommand release" -l log-format -d 'Write redlock\'s own stderr lines as text, or as one JSON object per line' -r -f -a "text\t''
json\t''"
complete -c redlock -n "__fish_redlock_using_subcommand release" -s k -l key -d 'Name of the lock' -r
complete -c redlock -n "__fish_redlock_using_subcommand release" -s t -l token -d 'Token printed by `acquire`' -r
complete -c redlock -n "__fish_redlock_using_subcommand release" -l reason -d 'With --force: why, for the lock\'s history (at most 200 characters)' -r
complete -c redlock -n "__fish_redlock_using_subcommand release" -l exit-status -d 'Record how the work under the lock ended, for `redlock history` (e.g. `$?` in a trap)' -r
complete -c redlock -n "__fish_redlock_using_subcommand release" -l tls-insecure -d 'Do not verify the server\'s certificate at all (development only; redlock warns)'
complete -c redlock -n "__fish_redlock_using_subcommand release" -s q -l quiet -d 'Print no notices for expected outcomes (busy, not held, free); errors still print'
complete -c redlock -n "__fish_redlock_using_subcommand release" -s v -l verbose -d 'Log each step to stderr'
complete -c redlock -n "__fish_redlock_using_subcommand release" -l force -d 'Remove the lock whoever holds it, and print who that was'
complete -c redlock -n "__fish_redlock_using_subcommand release" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c redlock -n "__fish_redlock_using_subcommand extend" -l redis -d 'Redis server URL; repeat for quorum mode [default: $REDIS_URL, else redis://127.0.0.1:6379]' -r
complete -c redlock -n "__fish_redlock_using_subcommand extend" -l password-file -d 'Read the Redis password from this file (its first line)' -r -F
complete -c redlock -n "__fish_redlock_using_subcommand extend" -l prefix -d 'Prefix of every key redlock writes' -r
complete -c redlock -n "__fish_redlock_using_subcommand extend" -l connect-timeout -d 'Give up connecting to Redis after this long (TLS handshake and login included)' -r
complete -c redlock -n "__fish_redlock_using_subcommand extend" -l command-timeout -d 'Give up on any single Redis command after this long' -r
complete -c redlock -n "__fish_redlock_using_subcommand extend" -l release-timeout -d 'Keep sending a release known not to have run (refused, no server reached) this long' -r
complete -c redlock -n "__fish_redlock_using_subcommand extend" -l tls-ca -d 'Trust the CAs in this PEM bundle instead of the system\'s' -r -F
complete -c redlock -n "__fish_redlock_using_subcommand extend" -l tls-cert -d 'Client certificate (PEM) for servers that require one; needs --tls-key' -r -F
complete -c redlock -n "__fish_redlock_using_subcommand extend" -l tls-key -d 'Private key (PEM) of --tls-cert; should be readable by its owner only' -r -F
complete -c redlock -n "__fish_redlock_using_subcommand extend" -l tls-server-name -d 'Verify the server\'s certificate against NAME instead of the URL\'s host' -r
complete -c redlock -n "__fish_redlock_using_subcommand extend" -l log-format -d 'Write redlock\'s own stderr lines as text, or as one JSON object per line' -r -f -a "text\t''
json\t''"
complete -c redlock -n "__fish_redlock_using_subcommand extend" -s k -l key -d 'Name of the lock' -r
complete -c redlock -n "__fish_redlock_using_subcommand extend" -s t -l token -d 'Token printed by `acquire`' -r
complete -c redlock -n "__fish_redlock_using_subcommand extend" -l ttl -d 'New lease, counted from now' -r
complete -c redlock -n "__fish_redlock_using_subcommand extend" -l replicas -d 'Count the renewal as done only once N replicas acknowledged it (exit 69 otherwise)' -r
complete -c redlock -n "__fish_redlock_using_subcommand extend" -l tls-insecure -d 'Do not verify the server\'s certificate at all (development only; redlock warns)'
complete -c redlock -n "__fish_redlock_using_subcommand extend" -s q -l quiet -d 'Print no notices for expected outcomes (busy, not held, free); errors still print'
complete -c redlock -n "__fish_redlock_using_subcommand extend" -s v -l verbose -d 'Log each step to stderr'
complete -c redlock -n "__fish_redlock_using_subcommand extend" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c redlock -n "__fish_redlock_using_subcommand inspect" -l redis -d 'Redis server URL; repeat for quorum mode [default: $REDIS_URL, else redis://127.0.0.1:6379]' -r
complete -c redlock -n "__fish_redlock_using_subcommand inspect" -l password-file -d 'Read the Redis password from this file (its first line)' -r -F
complete -c redlock -n "__fish_redlock_using_subcommand inspect" -l prefix -d 'Prefix of every key redlock writes' -r
complete -c redlock -n "__fish_redlock_using_subcommand inspect" -l connect-timeout -d 'Give up connecting to Redis after this long (TLS handshake and login included)' -r
complete -c redlock -n "__fish_redlock_using_subcommand inspect" -l command-timeout -d 'Give up on any single Redis command after this long' -r
complete -c redlock -n "__fish_redlock_using_subcommand inspect" -l release-timeout -d 'Keep sending a release known not to have run (refused, no server reached) this long' -r
complete -c redlock -n "__fish_redlock_using_subcommand inspect" -l tls-ca -d 'Trust the CAs in this PEM bundle instead of the system\'s' -r -F
complete -c redlock -n "__fish_redlock_using_subcommand inspect" -l tls-cert -d 'Client certificate (PEM) for servers that require one; needs --tls-key' -r -F
complete -c redlock -n "__fish_redlock_using_subcommand inspect" -l tls-key -d 'Private key (PEM) of --tls-cert; should be readable by its owner only' -r -F
complete -c redlock -n "__fish_redlock_using_subcommand inspect" -l tls-server-name -d 'Verify the server\'s certificate against NAME instead of the URL\'s host' -r
complete -c redlock -n "__fish_redlock_using_subcommand inspect" -l log-format -d 'Write redlock\'s own stderr lines as text, or as one JSON object per line' -r -f -a "text\t''
json\t''"
complete -c redlock -n "__fish_redlock_using_subcommand inspect" -s k -l key -d 'Name of the lock' -r
complete -c redlock -n "__fish_redlock_using_subcommand inspect" -l tls-insecure -d 'Do not verify the server\'s certificate at all (development only; redlock warns)'
complete -c redlock -n "__fish_redlock_using_subcommand inspect" -s q -l quiet -d 'Print no notices for expected outcomes (busy, not held, free); errors still print'
complete -c redlock -n "__fish_redlock_using_subcommand inspect" -s v -l verbose -d 'Log each step to stderr'
complete -c redlock -n "__fish_redlock_using_subcommand inspect" -l json -d 'Print JSON (documented in docs/reference.md) instead of a table'
complete -c redlock -n "__fish_redlock_using_subcommand inspect" -l wide -d 'On a terminal, show every column, whole (by default: the columns read first, fitted to its width; a pipe or a file always gets every column)'
complete -c redlock -n "__fish_redlock_using_subcommand inspect" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c redlock -n "__fish_redlock_using_subcommand history" -l redis -d 'Redis server URL; repeat for quorum mode [default: $REDIS_URL, else redis://127.0.0.1:6379]' -r
complete -c redlock -n "__fish_redlock_using_subcommand history" -l password-file -d 'Read the Redis password from this file (its first line)' -r -F
complete -c redlock -n "__fish_redlock_using_subcommand history" -l prefix -d 'Prefix of every key redlock writes' -r
complete -c redlock -n "__fish_redlock_using_subcommand history" -l connect-timeout -d 'Give up connecting to Redis after this long (TLS handshake and login included)' -r
complete -c redlock -n "__fish_redlock_using_subcommand history" -l command-timeout -d 'Give up on any single Redis command after this long' -r
complete -c redlock -n "__fish_redlock_using_subcommand history" -l release-timeout -d 'Keep sending a release known not to have run (refused, no server reached) this long' -r
complete -c redlock -n "__fish_redlock_using_subcommand history" -l tls-ca -d 'Trust the CAs in this PEM bundle instead of the system\'s' -r -F
complete -c redlock -n "__fish_redlock_using_subcommand history" -l tls-cert -d 'Client certificate (PEM) for servers that require one; needs --tls-key' -r -F
complete -c redlock -n "__fish_redlock_using_subcommand history" -l tls-key -d 'Private key (PEM) of --tls-cert; should be readable by its owner only' -r -F
complete -c redlock -n "__fish_redlock_using_subcommand history" -l tls-server-name -d 'Verify the server\'s certificate against NAME instead of the URL\'s host' -r
complete -c redlock -n "__fish_redlock_using_subcommand history" -l log-format -d 'Write redlock\'s own stderr lines as text, or as one JSON object per line' -r -f -a "text\t''
json\t''"
complete -c redlock -n "__fish_redlock_using_subcommand history" -s k -l key -d 'Name of the lock' -r
complete -c redlock -n "__fish_redlock_using_subcommand history" -l tls-insecure -d 'Do not verify the server\'s certificate at all (development only; redlock warns)'
complete -c redlock -n "__fish_redlock_using_subcommand history" -s q -l quiet -d 'Print no notices for expected outcomes (busy, not held, free); errors still print'
complete -c redlock -n "__fish_redlock_using_subcommand history" -s v -l verbose -d 'Log each step to stderr'
complete -c redlock -n "__fish_redlock_using_subcommand history" -l json -d 'Print JSON (documented in docs/reference.md) instead of a table'
complete -c redlock -n "__fish_redlock_using_subcommand history" -l wide -d 'On a terminal, show every column, whole (by default: the columns read first, fitted to its width; a pipe or a file always gets every column)'
complete -c redlock -n "__fish_redlock_using_subcommand history" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c redlock -n "__fish_redlock_using_subcommand check" -l redis -d 'Redis server URL; repeat for quorum mode [default: $REDIS_URL, else redis://127.0.0.1:6379]' -r
complete -c redlock -n "__fish_redlock_using_subcommand check" -l password-file -d 'Read the Redis password from this file (its first line)' -r -F
complete -c redlock -n "__fish_redlock_using_subcommand check" -l prefix -d 'Prefix of every key redlock writes' -r
complete -c redlock -n "__fish_redlock_using_subcommand check" -l connect-timeout -d 'Give up connecting to Redis after this long (TLS handshake and login included)' -r
complete -c redlock -n "__fish_redlock_using_subcommand check" -l command-timeout -d 'Give up on any single Redis command after this long' -r
complete -c redlock -n "__fish_redlock_using_subcommand check" -l release-timeout -d 'Keep sending a release known not to have run (refused, no server reached) this long' -r
complete -c redlock -n "__fish_redlock_using_subcommand check" -l tls-ca -d 'Trust the CAs in this PEM bundle instead of the system\'s' -r -F
complete -c redlock -n "__fish_redlock_using_subcommand check" -l tls-cert -d 'Client certificate (PEM) for servers that require one; needs --tls-key' -r -F
complete -c redlock -n "__fish_redlock_using_subcommand check" -l tls-key -d 'Private key (PEM) of --tls-cert; should be readable by its owner only' -r -F
complete -c redlock -n "__fish_redlock_using_subcommand check" -l tls-server-name -d 'Verify the server\'s certificate against NAME instead of the URL\'s host' -r
complete -c redlock -n "__fish_redlock_using_subcommand check" -l log-format -d 'Write redlock\'s own stderr lines as text, or as one JSON object per line' -r -f -a "text\t''
json\t''"
complete -c redlock -n "__fish_redlock_using_subcommand check" -s k -l key -d 'Name of a lock; repeat for several' -r
complete -c redlock -n "__fish_redlock_using_subcommand check" -l succeeded-within -d 'OK only if a hold ended with exit status 0 within this long (e.g. 26h for a daily job)' -r
complete -c redlock -n "__fish_redlock_using_subcommand check" -l max-held -d 'Not OK while a hold has lasted longer than this (a job stuck holding the lock)' -r
complete -c redlock -n "__fish_redlock_using_subcommand check" -l tls-insecure -d 'Do not verify the server\'s certificate at all (development only; redlock warns)'
complete -c redlock -n "__fish_redlock_using_subcommand check" -s q -l quiet -d 'Print no notices for expected outcomes (busy, not held, free); errors still print'
complete -c redlock -n "__fish_redlock_using_subcommand check" -s v -l verbose -d 'Log each step to stderr'
complete -c redlock -n "__fish_redlock_using_subcommand check" -l json -d 'Print a JSON array, one object per lock, instead of lines'
complete -c redlock -n "__fish_redlock_using_subcommand check" -l nagios -d 'Print one line for Nagios, Icinga and compatible monitoring (status, text, performance data) and exit with the plugin\'s code: 0 OK, 1 WARNING, 2 CRITICAL, 3 UNKNOWN'
complete -c redlock -n "__fish_redlock_using_subcommand check" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c redlock -n "__fish_redlock_using_subcommand list" -l redis -d 'Redis server URL; repeat for quorum mode [default: $REDIS_URL, else redis://127.0.0.1:6379]' -r
complete -c redlock -n "__fish_redlock_using_subcommand list" -l password-file -d 'Read the Redis password from this file (its first line)' -r -F
complete -c redlock -n "__fish_redlock_using_subcommand list" -l prefix -d 'Prefix of every key redlock writes' -r
complete -c redlock -n "__fish_redlock_using_subcommand list" -l connect-timeout -d 'Give up connecting to Redis after this long (TLS handshake and login included)' -r
complete -c redlock -n "__fish_redlock_using_subcommand list" -l command-timeout -d 'Give up on any single Redis command after this long' -r
complete -c redlock -n "__fish_redlock_using_subcommand list" -l release-timeout -d 'Keep sending a release known not to have run (refused, no server reached) this long' -r
complete -c redlock -n "__fish_redlock_using_subcommand list" -l tls-ca -d 'Trust the CAs in this PEM bundle instead of the system\'s' -r -F
complete -c redlock -n "__fish_redlock_using_subcommand list" -l tls-cert -d 'Client certificate (PEM) for servers that require one; needs --tls-key' -r -F
complete -c redlock -n "__fish_redlock_using_subcommand list" -l tls-key -d 'Private key (PEM) of --tls-cert; should be readable by its owner only' -r -F
complete -c redlock -n "__fish_redlock_using_subcommand list" -l tls-server-name -d 'Verify the server\'s certificate against NAME instead of the URL\'s host' -r
complete -c redlock -n "__fish_redlock_using_subcommand list" -l log-format -d 'Write redlock\'s own stderr lines as text, or as one JSON object per line' -r -f -a "text\t''
json\t''"
complete -c redlock -n "__fish_redlock_using_subcommand list" -l tls-insecure -d 'Do not verify the server\'s certificate at all (development only; redlock warns)'
complete -c redlock -n "__fish_redlock_using_subcommand list" -s q -l quiet -d 'Print no notices for expected outcomes (busy, not held, free); errors still print'
complete -c redlock -n "__fish_redlock_using_subcommand list" -s v -l verbose -d 'Log each step to stderr'
complete -c redlock -n "__fish_redlock_using_subcommand list" -l json -d 'Print JSON (documented in docs/reference.md) instead of a table'
complete -c redlock -n "__fish_redlock_using_subcommand list" -l wide -d 'On a terminal, show every column, whole (by default: the columns read first, fitted to its width; a pipe or a file always gets every column)'
complete -c redlock -n "__fish_redlock_using_subcommand list" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c redlock -n "__fish_redlock_using_subcommand metrics" -l redis -d 'Redis server URL; repeat for quorum mode [default: $REDIS_URL, else redis://127.0.0.1:6379]' -r
complete -c redlock -n "__fish_redlock_using_subcommand metrics" -l password-file -d 'Read the Redis password from this file (its first line)' -r -F
complete -c redlock -n "__fish_redlock_using_subcommand metrics" -l prefix -d 'Prefix of every key redlock writes' -r
complete -c redlock -n "__fish_redlock_using_subcommand metrics" -l connect-timeout -d 'Give up connecting to Redis after this long (TLS handshake and login included)' -r
complete -c redlock -n "__fish_redlock_using_subcommand metrics" -l command-timeout -d 'Give up on any single Redis command after this long' -r
complete -c redlock -n "__fish_redlock_using_subcommand metrics" -l release-timeout -d 'Keep sending a release known not to have run (refused, no server reached) this long' -r
complete -c redlock -n "__fish_redlock_using_subcommand metrics" -l tls-ca -d 'Trust the CAs in this PEM bundle instead of the system\'s' -r -F
complete -c redlock -n "__fish_redlock_using_subcommand metrics" -l tls-cert -d 'Client certificate (PEM) for servers that require one; needs --tls-key' -r -F
complete -c redlock -n "__fish_redlock_using_subcommand metrics" -l tls-key -d 'Private key (PEM) of --tls-cert; should be readable by its owner only' -r -F
complete -c redlock -n "__fish_redlock_using_subcommand metrics" -l tls-server-name -d 'Verify the server\'s certificate against NAME instead of the URL\'s host' -r
complete -c redlock -n "__fish_redlock_using_subcommand metrics" -l log-format -d 'Write redlock\'s own stderr lines as text, or as one JSON object per line' -r -f -a "text\t''
json\t''"
complete -c redlock -n "__fish_redlock_using_subcommand metrics" -l tls-insecure -d 'Do not verify the server\'s certificate at all (development only; redlock warns)'
complete -c redlock -n "__fish_redlock_using_subcommand metrics" -s q -l quiet -d 'Print no notices for expected outcomes (busy, not held, free); errors still print'
complete -c redlock -n "__fish_redlock_using_subcommand metrics" -s v -l verbose -d 'Log each step to stderr'
complete -c redlock -n "__fish_redlock_using_subcommand metrics" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c redlock -n "__fish_redlock_using_subcommand doctor" -l redis -d 'Redis server URL; repeat for quorum mode [default: $REDIS_URL, else redis://127.0.0.1:6379]' -r
complete -c redlock -n "__fish_redlock_using_subcommand doctor" -l password-file -d 'Read the Redis password from this file (its first line)' -r -F
complete -c redlock -n "__fish_redlock_using_subcommand doctor" -l prefix -d 'Prefix of every key redlock writes' -r
complete -c redlock -n "__fish_redlock_using_subcommand doctor" -l connect-timeout -d 'Give up connecting to Redis after this long (TLS handshake and login included)' -r
complete -c redlock -n "__fish_redlock_using_subcommand doctor" -l command-timeout -d 'Give up on any single Redis command after this long' -r
complete -c redlock -n "__fish_redlock_using_subcommand doctor" -l release-timeout -d 'Keep sending a release known not to have run (refused, no server reached) this long' -r
complete -c redlock -n "__fish_redlock_using_subcommand doctor" -l tls-ca -d 'Trust the CAs in this PEM bundle instead of the system\'s' -r -F
complete -c redlock -n "__fish_redlock_using_subcommand doctor" -l tls-cert -d 'Client certificate (PEM) for servers that require one; needs --tls-key' -r -F
complete -c redlock -n "__fish_redlock_using_subcommand doctor" -l tls-key -d 'Private key (PEM) of --tls-cert; should be readable by its owner only' -r -F
complete -c redlock -n "__fish_redlock_using_subcommand doctor" -l tls-server-name -d 'Verify the server\'s certificate against NAME instead of the URL\'s host' -r
complete -c redlock -n "__fish_redlock_using_subcommand doctor" -l log-format -d 'Write redlock\'s own stderr lines as text, or as one JSON object per line' -r -f -a "text\t''
json\t''"
complete -c redlock -n "__fish_redlock_using_subcommand doctor" -l tls-insecure -d 'Do not verify the server\'s certificate at all (development only; redlock warns)'
complete -c redlock -n "__fish_redlock_using_subcommand doctor" -s q -l quiet -d 'Print no notices for expected outcomes (busy, not held, free); errors still print'
complete -c redlock -n "__fish_redlock_using_subcommand doctor" -s v -l verbose -d 'Log each step to stderr'
complete -c redlock -n "__fish_redlock_using_subcommand doctor" -l json -d 'Print a JSON array of {check, verdict, detail} instead'
complete -c redlock -n "__fish_redlock_using_subcommand doctor" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c redlock -n "__fish_redlock_using_subcommand completions" -l redis -d 'Redis server URL; repeat for quorum mode [default: $REDIS_URL, else redis://127.0.0.1:6379]' -r
complete -c redlock -n "__fish_redlock_using_subcommand completions" -l password-file -d 'Read the Redis password from this file (its first line)' -r -F
complete -c redlock -n "__fish_redlock_using_subcommand completions" -l prefix -d 'Prefix of every key redlock writes' -r
complete -c redlock -n "__fish_redlock_using_subcommand completions" -l connect-timeout -d 'Give up connecting to Redis after this long (TLS handshake and login included)' -r
complete -c redlock -n "__fish_redlock_using_subcommand completions" -l command-timeout -d 'Give up on any single Redis command after this long' -r
complete -c redlock -n "__fish_redlock_using_subcommand completions" -l release-timeout -d 'Keep sending a release known not to have run (refused, no server reached) this long' -r
complete -c redlock -n "__fish_redlock_using_subcommand completions" -l tls-ca -d 'Trust the CAs in this PEM bundle instead of the system\'s' -r -F
complete -c redlock -n "__fish_redlock_using_subcommand completions" -l tls-cert -d 'Client certificate (PEM) for servers that require one; needs --tls-key' -r -F
complete -c redlock -n "__fish_redlock_using_subcommand completions" -l tls-key -d 'Private key (PEM) of --tls-cert; should be readable by its owner only' -r -F
complete -c redlock -n "__fish_redlock_using_subcommand completions" -l tls-server-name -d 'Verify the server\'s certificate against NAME instead of the URL\'s host' -r
complete -c redlock -n "__fish_redlock_using_subcommand completions" -l log-format -d 'Write redlock\'s own stderr lines as text, or as one JSON object per line' -r -f -a "text\t''
json\t''"
complete -c redlock -n "__fish_redlock_using_subcommand completions" -l tls-insecure -d 'Do not verify the server\'s certificate at all (development only; redlock warns)'
complete -c redlock -n "__fish_redlock_using_subcommand completions" -s q -l quiet -d 'Print no notices for expected outcomes (busy, not held, free); errors still print'
complete -c redlock -n "__fish_redlock_using_subcommand completions" -s v -l verbose -d 'Log each step to stderr'
complete -c redlock -n "__fish_redlock_using_subcommand completions" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c redlock -n "__fish_redlock_using_subcommand man" -l redis -d 'Redis server URL; repeat for quorum mode [default: $REDIS_URL, else redis://127.0.0.1:6379]' -r
complete -c redlock -n "__fish_redlock_using_subcommand man" -l password-file -d 'Read the Redis password from this file (its first line)' -r -F
complete -c redlock -n "__fish_redlock_using_subcommand man" -l prefix -d 'Prefix of every key redlock writes' -r
complete -c redlock -n "__fish_redlock_using_subcommand man" -l connect-timeout -d 'Give up connecting to Redis after this long (TLS handshake and login included)' -r
complete -c redlock -n "__fish_redlock_using_subcommand man" -l command-timeout -d 'Give up on any single Redis command after this long' -r
complete -c redlock -n "__fish_redlock_using_subcommand man" -l release-timeout -d 'Keep sending a release known not to have run (refused, no server reached) this long' -r
complete -c redlock -n "__fish_redlock_using_subcommand man" -l tls-ca -d 'Trust the CAs in this PEM bundle instead of the system\'s' -r -F
complete -c redlock -n "__fish_redlock_using_subcommand man" -l tls-cert -d 'Client certificate (PEM) for servers that require one; needs --tls-key' -r -F
complete -c redlock -n "__fish_redlock_using_subcommand man" -l tls-key -d 'Private key (PEM) of --tls-cert; should be readable by its owner only' -r -F
complete -c redlock -n "__fish_redlock_using_subcommand man" -l tls-server-name -d 'Verify the server\'s certificate against NAME instead of the URL\'s host' -r
complete -c redlock -n "__fish_redlock_using_subcommand man" -l log-format -d 'Write redlock\'s own stderr lines as text, or as one JSON object per line' -r -f -a "text\t''
json\t''"
complete -c redlock -n "__fish_redlock_using_subcommand man" -l install -d 'Write every page into DIR/man1 instead (e.g. /usr/local/share/man)' -r -F
complete -c redlock -n "__fish_redlock_using_subcommand man" -l tls-insecure -d 'Do not verify the server\'s certificate at all (development only; redlock warns)'
complete -c redlock -n "__fish_redlock_using_subcommand man" -s q -l quiet -d 'Print no notices for expected outcomes (busy, not held, free); errors still print'
complete -c redlock -n "__fish_redlock_using_subcommand man" -s v -l verbose -d 'Log each step to stderr'
complete -c redlock -n "__fish_redlock_using_subcommand man" -s h -l help -d 'Print help (see more with \'--help\')'

complete -c redlock -n "__fish_redlock_using_subcommand man" -f -a "run acquire release extend inspect history check list metrics doctor completions man"
function __fish_redlock_after_dashes
    set -l words (commandline -opc)
    set -l at (contains -i -- -- $words); or return 1
    __fish_complete_subcommand --commandline $words[(math $at + 1)..-1] (commandline -ct)
end
complete -c redlock -n "__fish_redlock_using_subcommand run; and contains -- -- (commandline -opc)" -x -a "(__fish_redlock_after_dashes)"
