# hostkit.verify.targets runs this in a child Python (argv: inventory, --limit patterns), so
# that loading the inventory does not monkey-patch the caller for gevent. It prints the
# pickled [(name, data)] list; exit status 3 with the reason on stderr.
import pickle, sys
from hostkit.fleet.inventory import load_inventory
limit = sys.argv[2:] or None
try:
    hosts = load_inventory(sys.argv[1], limit=limit)
except FileNotFoundError as error:
    sys.stderr.write(str(error)); sys.exit(3)
except Exception as error:
    sys.stderr.write(f"cannot load inventory {sys.argv[1]}: {type(error).__name__}: {error}"); sys.exit(3)
sys.stdout.buffer.write(pickle.dumps(hosts))
