# `hostkit doctor`'s process part. hostkit.doctor.gather sets before it: hk_mark, hk_with_proc
# (`yes`: list processes with ps; a local run reads them with psutil instead) and hk_ps_s
# (ps's deadline: reading a process's command line waits on its memory map, which a process
# stuck in the kernel can hold); and hk_deadline.
if [ "$hk_with_proc" = yes ]; then
  echo "${hk_mark}ps@@"
  hk_deadline "$hk_ps_s" ps ps -e -ww -o pid=,ppid=,rss=,args= 2>/dev/null
fi
