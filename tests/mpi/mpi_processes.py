"""Finding the processes of one mpirun's ranks (the rank kill and hang checks share this)."""
import os


def descendants(pid):
    """Every process below pid (mpirun may start the ranks through a helper)."""
    children = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
                children.setdefault(ppid, []).append(int(entry))
            except (OSError, IndexError, ValueError):
                pass
    out, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return out


def rank_of(pid):
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            for item in f.read().split(b"\0"):
                if item.startswith(b"OMPI_COMM_WORLD_RANK="):
                    return int(item.split(b"=")[1])
    except OSError:
        pass
    return None
